"""Communication hooks: which of torch's a DDP model runs, and its state."""


import torch.distributed as dist

from .common import _jsonable
from .spies import _POWERSGD_SEEDS, _REGISTERED_HOOKS


# ---------------------------------------------------------------------------------------------------------
# Communication hooks: which of torch's, and its state.
# ---------------------------------------------------------------------------------------------------------
_TORCH_HOOKS = "torch.distributed.algorithms.ddp_comm_hooks"
_HOOK_KINDS = {
    "allreduce_hook": "allreduce",
    "fp16_compress_hook": "fp16_compress",
    "bf16_compress_hook": "bf16_compress",
    "powerSGD_hook": "powerSGD",
    "batched_powerSGD_hook": "batched_powerSGD",
    "noop_hook": "noop",
    "post_localSGD_hook": "post_localSGD",
    "fp16_compress_wrapper_hook": "fp16_compress_wrapper",
    "bf16_compress_wrapper_hook": "bf16_compress_wrapper",
    "quantization_pertensor_hook": "quantization_pertensor",
    "quantization_perchannel_hook": "quantization_perchannel",
}
_POWERSGD_FIELDS = ("matrix_approximation_rank", "start_powerSGD_iter", "min_compression_rate",
                    "use_error_feedback", "warm_start", "random_seed", "orthogonalization_epsilon",
                    "batch_tensors_with_same_shape")


def _hook_function(hook):
    return hook.func if hasattr(hook, "func") and callable(getattr(hook, "func")) else hook  # functools.partial


def _hook_name(hook):
    f = _hook_function(hook)
    name = getattr(f, "__qualname__", None) or getattr(f, "__name__", None)
    return name if name is not None else type(hook).__name__


def _hook_kind(name, module):
    """torch's hooks by name (only when the function is torch's, or its module unknown); others by name."""
    short = name.rsplit(".", 1)[-1]
    if short in _HOOK_KINDS and (module is None or module.startswith(_TORCH_HOOKS)):
        return _HOOK_KINDS[short]
    return short


def _wrapped_hook(hook):
    """The hook fp16_compress_wrapper / bf16_compress_wrapper wrapped (their closure's `hook`), or None."""
    f = _hook_function(hook)
    code, cells = getattr(f, "__code__", None), getattr(f, "__closure__", None)
    if code is None or not cells:
        return None
    for name, cell in zip(code.co_freevars, cells):
        if name == "hook":
            return cell.cell_contents
    return None


def _powersgd_seed(state):
    seed = getattr(state, "random_seed", None)
    if seed is None:
        seed = _POWERSGD_SEEDS.get(id(state))
    if seed is None:
        try:
            import numpy as np

            a, b = state.rng.get_state(), np.random.RandomState(0).get_state()
            if a[0] == b[0] and (a[1] == b[1]).all() and tuple(a[2:]) == tuple(b[2:]):
                seed = 0
        except Exception:
            seed = None
    return seed


def _find_powersgd_state():
    try:
        import gc

        from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState
    except Exception:
        return None
    # type() and not isinstance(): isinstance would read __class__ of every object, which warns on some.
    found = [o for o in gc.get_objects() if issubclass(type(o), PowerSGDState)]
    return found[0] if len(found) == 1 else None


def _hook_state_fields(kind, state):
    fields = {}
    if state is None:
        return fields
    if kind in ("powerSGD", "batched_powerSGD"):
        for f in _POWERSGD_FIELDS:
            if f == "random_seed":
                seed = _powersgd_seed(state)
                if seed is not None:
                    fields[f] = _jsonable(seed)
            elif hasattr(state, f):
                fields[f] = _jsonable(getattr(state, f))
    elif kind == "post_localSGD":
        for f in ("start_localSGD_iter", "iter", "post_local_gradient_allreduce"):
            if hasattr(state, f):
                fields[f] = _jsonable(getattr(state, f))
        sub = getattr(state, "subgroup", None)
        fields["subgroup_size"] = None if sub is None else int(dist.get_world_size(sub))
    return fields


class _HookInfo:
    """kind, name, module, inner kind and state fields of the DDP model's comm hook (all None without one)."""

    def __init__(self, ddp_model, powersgd_cache):
        self.kind = self.name = self.module = self.inner = None
        self.fields = {}
        hook, state = None, None
        hooks = getattr(ddp_model, "_comm_hooks", None)  # torch 2.x: [(hook, state)]
        if hooks:
            hook, state = hooks[-1]
        elif ddp_model in _REGISTERED_HOOKS:
            hook, state = _REGISTERED_HOOKS[ddp_model]
        if hook is not None:
            self.name = _hook_name(hook)
            self.module = getattr(_hook_function(hook), "__module__", None)
        else:
            try:
                self.name = ddp_model._get_ddp_logging_data().get("comm_hook") or None
            except Exception:
                self.name = None
            if self.name is not None and "powerSGD" in self.name:  # registered before this module's import
                if not powersgd_cache:
                    powersgd_cache.append(_find_powersgd_state())
                state = powersgd_cache[0]
        if self.name is None:
            # A builtin C++ hook (_register_builtin_comm_hook) leaves no name we can read: say nothing.
            return
        self.kind = _hook_kind(self.name, self.module)
        state_kind = self.kind
        if self.kind in ("fp16_compress_wrapper", "bf16_compress_wrapper"):
            inner = _wrapped_hook(hook) if hook is not None else None
            if inner is not None:
                self.inner = _hook_kind(_hook_name(inner), getattr(_hook_function(inner), "__module__", None))
                state_kind = self.inner
        self.fields = _hook_state_fields(state_kind, state)
