"""The recorder's internals as one namespace, for the tests that reach into it (digests, the step writer, the
order probe, injected faults). The recorder is a package of modules, each a job (verify/ddplab_trace/): reading
a name here finds it in the module that holds it; setting one sets it in every module that holds it (defines or
imports it), so that a patched function or flag is the one every part of the recorder uses.

    from recorder_internals import T    # after verify/ is on sys.path, as for `from ddplab_trace import ...`
"""
import importlib
import pkgutil

import ddplab_trace


class _Internals:
    def __init__(self):
        mods = [importlib.import_module("ddplab_trace." + m.name) for m in pkgutil.iter_modules(ddplab_trace.__path__)]
        object.__setattr__(self, "_mods", mods + [ddplab_trace])

    def __getattr__(self, name):
        for m in self._mods:
            if name in vars(m):
                return vars(m)[name]
        raise AttributeError("the recorder has no %r" % name)

    def __setattr__(self, name, value):
        held = [m for m in self._mods if name in vars(m)]
        if not held:
            raise AttributeError("the recorder has no %r" % name)
        for m in held:
            setattr(m, name, value)


T = _Internals()
