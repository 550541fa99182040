"""The spies installed at import on torch's classes (comm hooks, PowerSGDState, Join, model averaging, the
DataLoader iterator): each calls the original once and reports to the open trace."""

import weakref

import torch.distributed as dist

from .common import _active, _spy_failed


# ---------------------------------------------------------------------------------------------------------
# Spies installed at import. Each calls the original exactly once with its arguments and returns its result;
# what it records is wrapped in try/except (_spy_failed).
# ---------------------------------------------------------------------------------------------------------
def _wrap(cls, name, make):
    original = cls.__dict__.get(name)
    if original is None or getattr(original, "_ddplab_spy", False):
        return
    spy = make(original)
    spy._ddplab_spy = True
    spy.__wrapped__ = original
    spy.__doc__ = original.__doc__
    spy.__name__ = getattr(original, "__name__", name)
    setattr(cls, name, spy)


# Communication hooks. torch 2.x keeps (hook, state) in ddp_model._comm_hooks; torch 1.13 gives the state to
# C++ and keeps only the hook's __qualname__ (in _get_ddp_logging_data()["comm_hook"]), so the hook and its
# state are remembered here per DDP object.
_REGISTERED_HOOKS = weakref.WeakKeyDictionary()
# PowerSGDState keeps its random_seed only inside a numpy RandomState (and has __slots__): remembered by id.
_POWERSGD_SEEDS = {}
# Join contexts entered and exited in this process: step segments for uneven inputs.
_JOIN_EVENTS = [0]


def _install_spies():
    try:
        from torch.nn.parallel import DistributedDataParallel as _DDP

        def make(original):
            def register_comm_hook(self, state, hook):
                try:
                    _REGISTERED_HOOKS[self] = (hook, state)
                except Exception as e:
                    _spy_failed("register_comm_hook spy", e)
                return original(self, state, hook)
            return register_comm_hook

        _wrap(_DDP, "register_comm_hook", make)
    except Exception:  # pragma: no cover
        pass

    try:
        from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

        def make(original):
            def __init__(self, *args, **kwargs):
                original(self, *args, **kwargs)
                try:
                    import inspect

                    bound = inspect.signature(original).bind(self, *args, **kwargs)
                    bound.apply_defaults()
                    _POWERSGD_SEEDS[id(self)] = bound.arguments.get("random_seed")
                except Exception as e:
                    _spy_failed("PowerSGDState spy", e)
            return __init__

        _wrap(PowerSGDState, "__init__", make)
    except Exception:  # no numpy, or no such module
        pass

    try:
        from torch.distributed.algorithms.join import Join

        def make_enter(original):
            def __enter__(self):
                _join_event()
                return original(self)
            return __enter__

        def make_exit(original):
            def __exit__(self, *args):
                _join_event()
                return original(self, *args)
            return __exit__

        _wrap(Join, "__enter__", make_enter)
        _wrap(Join, "__exit__", make_exit)
    except Exception:  # pragma: no cover
        pass

    try:
        import torch.distributed.algorithms.model_averaging.utils as avg_utils

        original = avg_utils.average_parameters
        if not getattr(original, "_ddplab_spy", False):
            def average_parameters(params, process_group, *args, **kwargs):
                t, size = _active(), None
                if t is not None:
                    try:  # averaged only where the rank is in the group (else torch returns at once)
                        g = process_group if process_group is not None else dist.group.WORLD
                        if not dist._rank_not_in_group(g):
                            size = dist.get_world_size(g)
                    except Exception as e:
                        _spy_failed("model averaging spy", e)
                out = original(params, process_group, *args, **kwargs)
                if t is not None and size is not None:
                    try:
                        t._on_averaged(size)
                    except Exception as e:
                        _spy_failed("model averaging spy", e)
                return out

            average_parameters._ddplab_spy = True
            average_parameters.__wrapped__ = original
            average_parameters.__doc__ = original.__doc__
            avg_utils.average_parameters = average_parameters
    except Exception:  # pragma: no cover
        pass

    try:
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        def make_init(original):
            def __init__(self, loader, *args, **kwargs):
                try:
                    _ITER_LOADER[self] = weakref.ref(loader)
                except Exception as e:
                    _spy_failed("DataLoader spy", e)
                return original(self, loader, *args, **kwargs)
            return __init__

        def make_next_index(original):
            def _next_index(self, *args, **kwargs):
                idx = original(self, *args, **kwargs)  # StopIteration passes through
                t = _active()
                if t is not None:
                    try:
                        t._data_on_index(self, idx)
                    except Exception as e:
                        _spy_failed("DataLoader spy", e)
                return idx
            return _next_index

        def make_next(original):
            def __next__(self):
                data = original(self)
                t = _active()
                if t is not None:
                    try:
                        t._data_on_yield(self)
                    except Exception as e:
                        _spy_failed("DataLoader spy", e)
                return data
            return __next__

        _wrap(_BaseDataLoaderIter, "__init__", make_init)
        _wrap(_BaseDataLoaderIter, "_next_index", make_next_index)
        _wrap(_BaseDataLoaderIter, "__next__", make_next)
    except Exception:  # pragma: no cover
        pass


def _join_event():
    try:
        _JOIN_EVENTS[0] += 1
        _on_join_event()
    except Exception as e:
        _spy_failed("Join spy", e)


def _on_join_event():
    pass  # a seam: tests/ddp_check/recorder_faults.py makes it raise


_ITER_LOADER = weakref.WeakKeyDictionary()  # DataLoader iterator -> weakref to its DataLoader
_ITER_STATE = weakref.WeakKeyDictionary()   # DataLoader iterator -> _IterState
_SUBSET_MAPS = weakref.WeakKeyDictionary()  # outermost Subset -> [base index per subset index]

_install_spies()
