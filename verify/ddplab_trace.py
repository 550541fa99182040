"""Records what PyTorch DistributedDataParallel did in a training script, for ddplab's ddp_check.

    from ddplab_trace import DDPTrace
    trace = DDPTrace(ddp_model, optimizer, "runs/mine")   # after DDP(...) (or fully_shard(model)), before the loop
    ...                                                   # the training loop, unchanged
    trace.close()                                         # or: with DDPTrace(...) as trace: ...

The format it writes is docs/trace_format.md: RUN_DIR/rank{r}/step{S:06d}.safetensors per recorded
optimizer step, RUN_DIR/rank{r}/manifest.json and data.json (rewritten after every recorded step, final at
close()). Needs only torch (1.13 or 2.x), CPU/Gloo or CUDA/NCCL, mp.spawn or torchrun.

It never breaks the run. Only DDPTrace()'s argument checks raise. Anything that goes wrong inside the
recorder later (an unknown tensor kind, a full or read-only disk, a torch it does not know, a bug of its own)
writes one line to stderr (`ddplab_trace: <what> at step S; recording stopped`), the manifest says where
("stopped"), and the training goes on untouched: every hook, callback and wrapper catches its own errors and
calls what it wraps exactly once with the arguments it got. Exceptions of the script's own code (a closure,
the optimizer's step) pass through unchanged.

It only observes, so the run is bitwise the run without it: tensor hooks that return None, copies made
with .detach() and .clone()/.cpu(), no random numbers drawn (the run id comes from os.urandom on each
rank and rank 0's wins). Its collectives of its own: in DDPTrace(), an all_gather_object that shares the run
id and every rank's verdict on its directory (so all ranks refuse together); in close(), where it measures the
all-reduce's addition order (measure_order; not on Gloo, whose order is known, unless asked), one all-reduce
on DDP's process group by which the ranks agree, then N(N-1)/2 + 1 all-reduces of each bucket size (every rank
must call close(), as with any collective).

How each record is taken:
  local/{k}/{name}  a hook on each parameter (param.register_hook): it fires before AccumulateGrad and
                    so before DDP's reducer hook (a post hook of AccumulateGrad) sees the gradient.
                    FSDP2 (fully_shard): the same hook on each unsharded parameter FSDP all-gathers, set by a
                    forward pre-hook on every FSDP module (it runs after FSDP's own, which unshards); the
                    sharded parameters, their .grad and the optimizer's state are DTensors, read through
                    to_local() (this rank's shard). The manifest's "fsdp" says the groups and shard dims.
  prior/{name}      every p.grad, read in the first parameter hook of the step's first backward (before any
                    AccumulateGrad of the step ran).
  grad/{name}       the first parameter hook of a synchronised backward queues a callback on the autograd
                    engine, which queues a second one. The engine runs its final callbacks in the order
                    queued, including ones queued while they run, and DDP's reducer queues finalize_backward
                    (which waits for the all-reduce and writes .grad) during the backward, after our first
                    hook; so the second callback runs after DDP finished and before backward() returns.
                    (Measured on torch 1.13 and 2.5.1, Gloo, 3 ranks: the snapshot equals .grad after backward()
                    returned, is identical on all ranks, and differs from the local gradient.)
  sync              ddp_model.require_backward_grad_sync when the DDP forward that built the graph ran (DDP
                    decides at forward whether the backward reduces; no_sync() sets it False).
  grad_step/..., param_before/..., state/..., buffer/...   optimizer.step, wrapped on the instance; with a
                    closure (step(closure), as Lightning calls it) after the closure's first call returned.
  param_after/...   after the original step returned; then the file is copied to a staging buffer and written
                    by a thread of its own with O_DIRECT (temporary name, renamed) while training goes on;
                    the manifest lists a step once its file is whole (_StepWriter).
  Digests (full=False, the default): after a rank's first recorded step, what ddp_check predicts bit for
                    bit (grad/, param_after/, the state) is a 32-bit digest (fold64) instead of values:
                    a step file is then about the local gradients' bytes. full=True keeps every value.
  inputs            a forward pre-hook on the DDP module: BLAKE2b of each sample of its first tensor argument.
  data.json         DataLoader iterators (wrapped at import): the sampler's indices, mapped to the base dataset.
Importing this module also wraps, calling each original unchanged: DistributedDataParallel.register_comm_hook
and PowerSGDState.__init__ (the hook's state on torch 1.13), Join.__enter__/__exit__ (segments of uneven
steps), model_averaging.utils.average_parameters (post-local SGD's averagings) and the DataLoader iterator.
"""

import array
import collections
import errno
import hashlib
import json
import mmap
import operator
import os
import sys
import threading
import time
import weakref
import zlib

import torch
import torch.distributed as dist

__all__ = ["DDPTrace", "LightningCallback"]

FORMAT = "ddplab-trace"
VERSION = 1
DEFAULT_MAX_BYTES = 2 << 30  # per rank
MAX_DATA_INDICES = 10_000_000  # per rank, all loaders together (data.json)

try:  # only to know whether Tensor.numpy() works
    import numpy

    _HAVE_NUMPY = numpy is not None
except Exception:  # pragma: no cover - torch without numpy
    _HAVE_NUMPY = False


class _Unrecordable(Exception):
    """Something the trace format cannot hold: recording stops with this message as the reason."""


# ---------------------------------------------------------------------------------------------------------
# What DDPTrace is given: DistributedDataParallel itself, or what frameworks wrap it in. Seen through: Fabric's
# _FabricModule (its _forward_module), torch.compile's OptimizedModule (_orig_mod), torch 2.x's composable
# replicate() (a DDP over the module's parameters, built at the first forward); and optimizer wrappers (Fabric's
# _FabricOptimizer, accelerate's AcceleratedOptimizer, Lightning's LightningOptimizer: .optimizer or ._optimizer),
# whose step() calls the torch optimizer's only when it really steps (accelerate's skipped steps under accumulate,
# GradScaler's on inf), so that only real steps are recorded.
# ---------------------------------------------------------------------------------------------------------
class _Replicated:
    """replicate(module) as the recorder reads a DDP model: .module is the learner's module (its names), the rest
    the DistributedDataParallel inside, built now if the first forward has not built it yet (its constructor's
    broadcast: every rank makes DDPTrace at the same point of its script, as it would call DDP())."""

    def __init__(self, module, state):
        if not state.has_initialized:
            state.lazy_init()
        ddp = state._ddp
        if [id(p) for p in ddp.module.parameters()] != [id(p) for p in module.parameters() if p.requires_grad]:
            raise _Unrecordable("replicate() over other parameters than the module's (ignored_modules, or parameters "
                                "managed by fully_shard) is not recorded")
        self.module = module
        self._ddp = ddp

    def __getattr__(self, name):  # reducer, require_backward_grad_sync, _comm_hooks, ...: the DDP inside
        return getattr(self.__dict__["_ddp"], name)

    def register_forward_pre_hook(self, *args, **kwargs):  # the learner calls the module, not the DDP inside
        return self.module.register_forward_pre_hook(*args, **kwargs)


def _fsdp_module_class():
    for where in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            mod = __import__(where, fromlist=["FSDPModule"])
            return getattr(mod, "FSDPModule")
        except Exception:
            continue
    return None


def _fsdp_param_groups(module):
    """An FSDP2 module's parameter groups (torch 2.15 keeps a list; earlier 2.x one group or None)."""
    state = module._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is None:
        group = getattr(state, "_fsdp_param_group", None)
        groups = [group] if group is not None else []
    return list(groups)


class _Sharded:
    """fully_shard(model) (FSDP2, torch 2.x) as the recorder reads it: .module is the learner's root module, whose
    parameters are the sharded DTensors the optimizer steps; .groups are FSDP's parameter groups, one reduce-scatter
    each per synchronised backward (docs/trace_format.md, "fsdp")."""

    def __init__(self, module, fsdp_class):
        self.module = module
        self.groups = []  # (module name, module, FSDPParamGroup)
        for name, sub in module.named_modules():
            if isinstance(sub, fsdp_class):
                for group in _fsdp_param_groups(sub):
                    self.groups.append((name, sub, group))

    @property
    def require_backward_grad_sync(self):
        """set_requires_gradient_sync(): whether the next backward reduce-scatters (all groups alike)."""
        flags = {bool(getattr(g, "reduce_grads", True)) for _, _, g in self.groups}
        if len(flags) > 1:
            raise _Unrecordable("set_requires_gradient_sync differs between this model's FSDP modules, which ddp_check "
                                "does not model")
        return flags.pop() if flags else True

    def register_forward_pre_hook(self, *args, **kwargs):
        return self.module.register_forward_pre_hook(*args, **kwargs)


def _replicate_state(m):
    try:
        from torch.distributed._composable import replicate
        st = replicate.state(m)
    except Exception:
        return None
    return st if st is not None and hasattr(st, "lazy_init") else None


def _what_model(m):
    """(model, None) for a model the recorder records, else (None, why: one line)."""
    seen = m
    for _ in range(8):
        if hasattr(m, "module") and hasattr(m, "reducer"):
            return m, None
        inner = getattr(m, "_forward_module", None)  # Fabric's _FabricModule
        if inner is None:
            inner = getattr(m, "_orig_mod", None)  # torch.compile
        if inner is None or inner is m:
            break
        m = inner
    st = _replicate_state(m)
    if st is not None:
        return _Replicated(m, st), None
    names = {type(x).__name__ for x in m.modules()} if hasattr(m, "modules") else set()
    if "FullyShardedDataParallel" in names:
        return None, ("%s is sharded by FullyShardedDataParallel (FSDP1), which ddp_check does not check (fully_shard, "
                      "FSDP2, it does): nothing recorded" % type(seen).__name__)
    fsdp_class = _fsdp_module_class()
    if fsdp_class is not None and hasattr(m, "modules") and any(isinstance(x, fsdp_class) for x in m.modules()):
        if not isinstance(m, fsdp_class):
            return None, ("%s has fully_shard on some of its modules but not on itself, and the recorder needs it on "
                          "the model it is given too (fully_shard(model) after its layers): nothing recorded"
                          % type(seen).__name__)
        return _Sharded(m, fsdp_class), None
    return None, ("the model given is a %s, not DistributedDataParallel (nor replicate(), Fabric's setup(), "
                  "accelerate's prepare() or torch.compile of one): nothing recorded"
                  % type(seen).__name__)


def _framework(model, optimizer):
    """The training framework whose wrappers the script passed ("fabric", "accelerate"), or None: its advice is
    given in its own words."""
    for obj in (model, optimizer):
        mod = type(obj).__module__ or ""
        if mod.startswith(("lightning.fabric", "lightning_fabric")):
            return "fabric"
        if mod.startswith("accelerate"):
            return "accelerate"
    return None


def _torch_optimizer(opt):
    """The torch.optim optimizer inside Fabric's, accelerate's or Lightning's wrapper (or opt itself)."""
    for _ in range(8):  # Fabric's wrapper is also an instance of the optimizer's class (FabricSGD): look inside first
        inner = getattr(opt, "optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer):
            inner = getattr(opt, "_optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer) or inner is opt:
            return opt
        opt = inner
    return opt


# ---------------------------------------------------------------------------------------------------------
# The open traces. The spies installed at import (below) report to the most recently opened trace that is
# still open; with none open they only call the original.
# ---------------------------------------------------------------------------------------------------------
_OPEN = []
_PENDING_STOP = []  # why, when a spy failed while no trace was open: the next DDPTrace starts stopped


def _active():
    return _OPEN[-1] if _OPEN and not _OPEN[-1]._stopped else None


def _spy_failed(what, e):
    """A spy's own error: stop the open trace (or the next one), never the run."""
    try:
        if _OPEN:
            _OPEN[-1]._stop_for(e, what)  # a no-op when it stopped already
        elif not _PENDING_STOP:
            why = _why(e, what)
            _PENDING_STOP.append(why)
            sys.stderr.write("ddplab_trace: %s at step 0; recording stopped\n" % why)
            sys.stderr.flush()
    except Exception:
        pass


def _why(e, where):
    if isinstance(e, _Unrecordable):
        why = str(e)
    elif isinstance(e, OSError):
        why = "cannot write %s (%s)" % (e.filename or "the trace", e.strerror or e)
    else:
        why = "internal error in the %s (%s: %s)" % (where, type(e).__name__, e)
    return " ".join(why.split())  # one line


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


# ---------------------------------------------------------------------------------------------------------
# Small helpers.
# ---------------------------------------------------------------------------------------------------------
def _jsonable(v):
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else str(v)
    if isinstance(v, torch.Tensor):
        return _jsonable(v.item()) if v.numel() == 1 else _jsonable(v.detach().cpu().tolist())
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    return repr(v)


def _number(v):
    if isinstance(v, torch.Tensor):
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _dtype_name(dt):
    return str(dt).replace("torch.", "")


def _local(t):
    """A DTensor's local shard (FSDP2's sharded parameters, their .grad and optimizer state); any other tensor
    itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _cpu_copy(t):
    """A CPU copy of t that shares no memory with it (and is not touched by the run again)."""
    t = _local(t).detach()
    if t.device.type == "cpu":
        return t.clone()
    return t.to("cpu", copy=True)


def _tensor_bytes(t):
    """The tensor's elements, row-major, as raw little-endian bytes (a memoryview where numpy allows)."""
    t = t.contiguous().reshape(-1)
    if _HAVE_NUMPY:
        try:
            a = t.numpy()
            if sys.byteorder != "little":  # pragma: no cover
                a = a.byteswap()
            return memoryview(a).cast("B")
        except Exception:
            pass
    return bytes(t.reshape(-1).view(torch.uint8).tolist())  # pragma: no cover - no numpy, or bfloat16


def _fingerprint(sample):
    """First 8 bytes of BLAKE2b (64-byte digest) over the sample's raw bytes, as 16 hex digits."""
    return hashlib.blake2b(bytes(_tensor_bytes(sample))).digest()[:8].hex()


def _param_entry(name, p):
    """A parameter's manifest entry; "strides" where its memory is not row-major (channels_last): DDP's reducer
    lays its gradient into the bucket in the parameter's own strides, so the ring chunks it in memory order."""
    t = _local(p)
    entry = {"name": name, "shape": list(t.shape), "dtype": "float32"}
    if t.dim() > 1 and not t.is_contiguous() and t.layout == torch.strided:
        entry["strides"] = list(t.stride())
    return entry


def _nonfinite(named):
    """The names of [(name, tensor)] holding a NaN or an infinity: one isfinite pass each on the tensor's own
    device, and one transfer of a flag per tensor."""
    named = [(n, _local(t).detach()) for n, t in named if t is not None]
    named = [(n, t) for n, t in named if t.is_floating_point() and t.numel()]
    if not named:
        return []
    flags = torch.stack([torch.isfinite(t).all().to("cpu") for _, t in named]).tolist()
    return [n for (n, _), ok in zip(named, flags) if not ok]


def _first_tensor(obj, depth=0):
    if isinstance(obj, torch.Tensor):
        return obj
    if depth > 4:
        return None
    if isinstance(obj, (list, tuple)):
        for x in obj:
            t = _first_tensor(x, depth + 1)
            if t is not None:
                return t
    if isinstance(obj, dict):
        for x in obj.values():
            t = _first_tensor(x, depth + 1)
            if t is not None:
                return t
    return None


def _sqrt_is_ieee(device):
    """Whether this torch's float32 sqrt on `device` is IEEE's correctly rounded one (double sqrt rounded once
    to float is). Debian's 1.13 is; pip's CPU builds compute it with MKL's VML, 1 ulp off on about one value in
    five. ddp_check then compares Adam's step allclose. Uses its own tensors: draws nothing from the run's RNG."""
    x = torch.arange(1, 4097, dtype=torch.float64).mul_(0.7853981633974483).float().to(device)
    return bool(torch.equal(x.sqrt(), x.double().sqrt().float()))


_FOLD_COLUMNS = 1021


def _fold_numpy(a, n, words):
    import numpy as np
    w = a[:2 * words].view(np.uint64)
    full = words // _FOLD_COLUMNS * _FOLD_COLUMNS
    sums = np.add.reduce(w[:full].reshape(-1, _FOLD_COLUMNS), axis=0)  # wraps modulo 2^64
    sums[:words - full] += w[full:]
    if n % 2:
        sums[words % _FOLD_COLUMNS] += np.uint64(a[n - 1:].view(np.uint32)[0])
    return zlib.crc32(sums.astype("<u8").tobytes())


def _digest(t):
    """The digest ddp_check recomputes from its prediction ("digest": "fold64", src/check/trace.cc fold64_of):
    the float32 tensor's bytes, row-major little-endian, as 64-bit words (a last odd float is a word's low half)
    summed modulo 2^64 into 1021 columns (word j into column j mod 1021), then zlib's CRC-32 of the 1021 sums.
    Integer sums are exact in any order, so torch's own sum folds on the tensor's device (a GPU sends 8 KiB, not
    the tensor) at about half a CRC's cost over all the bytes (bench/README.md)."""
    t = _local(t).detach().reshape(-1)
    n = t.numel()
    words = n // 2
    if _HAVE_NUMPY and t.device.type == "cpu" and words >= _FOLD_COLUMNS:
        try:  # numpy's uint64 reduce is the same sums, about 1.6x faster than torch's int64 one on a CPU
            return _fold_numpy(t.numpy(), n, words)
        except Exception:
            pass
    sums = torch.zeros(_FOLD_COLUMNS, dtype=torch.int64, device=t.device)
    if words:
        head = t[:2 * words]
        try:
            w = head.view(torch.int64)
        except RuntimeError:  # a view at an odd offset (a bucket view): its words are not 8-byte aligned
            w = head.clone().view(torch.int64)
        full = words // _FOLD_COLUMNS * _FOLD_COLUMNS
        if full:
            sums += w[:full].view(-1, _FOLD_COLUMNS).sum(0)
        if full < words:
            sums[:words - full] += w[full:]
    if n % 2:
        sums[words % _FOLD_COLUMNS] += t[n - 1:].view(torch.int32).to(torch.int64)[0] & 0xFFFFFFFF
    return zlib.crc32(_tensor_bytes(sums.cpu()))


# ---------------------------------------------------------------------------------------------------------
# The all-reduce's addition order, measured on the run's own communicator (docs/trace_format.md,
# "allreduce_order"). For each bucket size n and each pair of ranks (a, b), one SUM all-reduce where rank a
# holds +2^30, rank b -2^30 and every other rank 1: in a chain ((x_p0 + x_p1) + x_p2) + ..., the ones added
# before both big values are absorbed (2^30 + m rounds to 2^30 for m < 32) and the pair cancels exactly, so
# the result counts the ones added after the later of a and b: N - 1 - max(pos a, pos b). Element by element,
# the N(N-1)/2 probes give every rank's position (rank c's is the least of its pairs' maxima; the first two
# share position 1, and x_a + x_b = x_b + x_a), and a result no chain can give says the element is no chain
# (a tree, two partial sums added). A seeded all-reduce (rank r: torch.randn(n) from manual_seed(seed + r)),
# digested, lets ddp_check confirm the whole order, not just the positions. Cost: N(N-1)/2 + 1 all-reduces
# of each distinct bucket size, at close().

_ORDER_SEED = 20261128
_MAX_ORDER_RUNS = 1 << 16  # per size: more runs than this (an order changing every few elements) is not kept


def _order_pairs(N):
    return [(a, b) for a in range(N) for b in range(a + 1, N)]


def _probe_values(N, rank, a, b):
    return 1073741824.0 if rank == a else -1073741824.0 if rank == b else 1.0


_NO_CHAIN = "element %d of %d is summed in no chain of the ranks (a tree, or partial sums added together)"


def _probe_maxpos(result, N):
    """A probe's sums as max(pos a, pos b) per element (int8), or None where some sum no chain gives."""
    mp = (N - 1) - result.double()
    ok = (mp == mp.round()) & (mp >= 1) & (mp <= N - 1)
    if not bool(ok.all()):
        return None, int((~ok).nonzero()[0])
    return mp.to(torch.int8), -1


def _decode_chain(maxpos, N):
    """maxpos: [P, n] int8, each probe's max(pos a, pos b) in _order_pairs order. (runs, why): runs [[begin,
    end, [ranks in the order added]], ...] covering [0, n), or None and why not."""
    n = maxpos.shape[1]
    dev = maxpos.device
    pos = torch.full((N, n), N, dtype=torch.long, device=dev)
    for k, (a, b) in enumerate(_order_pairs(N)):
        pos[a] = torch.minimum(pos[a], maxpos[k].long())
        pos[b] = torch.minimum(pos[b], maxpos[k].long())
    # The two ranks at position 1 are the first pair: the lower one takes position 0 (the pair commutes).
    order = (pos * N + torch.arange(N, device=dev).view(N, 1)).argsort(0)  # [N, n]: ranks in the order added
    del pos
    placed = torch.empty((N, n), dtype=torch.long, device=dev)
    placed.scatter_(0, order, torch.arange(N, device=dev).view(N, 1).expand(N, n).contiguous())
    placed.clamp_(min=1)                             # position 0 probes as 1
    for k, (a, b) in enumerate(_order_pairs(N)):    # every probe must be what this chain gives
        wrong = torch.maximum(placed[a], placed[b]) != maxpos[k].long()
        if bool(wrong.any()):
            return None, _NO_CHAIN % (int(wrong.nonzero()[0]), n)
    del placed
    order = order.t().contiguous()                  # [n, N]
    starts = torch.ones(n, dtype=torch.bool, device=dev)
    if n > 1:
        starts[1:] = (order[1:] != order[:-1]).any(1)
    begin = starts.nonzero().view(-1)
    if begin.numel() > _MAX_ORDER_RUNS:
        return None, "the order changes %d times over %d elements (over %d runs: not kept)" % (
            begin.numel(), n, _MAX_ORDER_RUNS)
    firsts = order[begin].cpu().tolist()
    begin = begin.cpu().tolist()
    return [[b, e, f] for b, e, f in zip(begin, begin[1:] + [n], firsts)], ""


def _measure_order(all_reduce, sizes, N, rank, device, buf=None):
    """The chain order of each size's SUM all-reduce, through `all_reduce(tensor)` (in place, every rank at
    once): [{"n", "runs" (or null and "why"), "digest" of the seeded sum}], and how many all-reduces it took.
    Every rank makes the same all-reduces whatever goes wrong on it: the probes pair up across ranks, so a
    rank that failed to decode (memory: n bytes per pair of ranks on `device`) still takes part, with the
    preallocated `buf` (max(sizes) floats on `device`), and its entry says why."""
    out, calls = [], 0
    pairs = _order_pairs(N)
    if buf is None:
        buf = torch.empty(max(sizes), dtype=torch.float32, device=device)
    for n in sizes:
        t = buf[:n]
        maxpos, bad, why = None, -1, ""
        try:
            maxpos = torch.empty((len(pairs), n), dtype=torch.int8, device=device)
        except Exception as e:
            why = _why(e, "order probes")
        for k, (a, b) in enumerate(pairs):
            t.fill_(_probe_values(N, rank, a, b))
            all_reduce(t)
            calls += 1
            if maxpos is None:
                continue
            try:
                mp, at = _probe_maxpos(t, N)
                if mp is None:
                    bad = at if bad < 0 else min(bad, at)
                else:
                    maxpos[k] = mp
            except Exception as e:
                maxpos, why = None, _why(e, "order probes")
        runs = None
        if maxpos is not None:
            try:
                runs, why = (None, _NO_CHAIN % (bad, n)) if bad >= 0 else _decode_chain(maxpos, N)
            except Exception as e:
                runs, why = None, _why(e, "order probes")
        del maxpos
        digest = None
        try:
            g = torch.Generator()
            g.manual_seed(_ORDER_SEED + rank)
            t.copy_(torch.randn(n, generator=g))
        except Exception as e:
            runs, why = None, _why(e, "order probes")
        all_reduce(t)
        calls += 1
        try:
            digest = _digest(t)
        except Exception as e:
            runs, why = None, _why(e, "order probes")
        entry = {"n": n, "runs": runs, "digest": digest if digest is not None else 0}
        if runs is None:
            entry["why"] = why
        out.append(entry)
    return out, calls


def _write_atomically(path, chunks):
    d, base = os.path.split(path)
    tmp = os.path.join(d, "." + base + ".tmp")
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


_PAGE = 4096


class _StepWriter:
    """Writes step files off the training thread, and past the page cache where the file system allows.

    A buffered write of 100 MB into fresh page-cache pages costs ~230 ms of CPU (allocating and filling the
    pages); the same write with O_DIRECT costs ~8 ms of CPU and ~210 ms of waiting on the disk (measured here,
    bench/README.md). So each step's file is copied into a page-aligned staging buffer (two, used in turn:
    the training reuses its own buffers at the next backward) and written from a thread with O_DIRECT, while
    the training goes on. At most one write is in flight; the next step's submit, and close(), wait for it.
    A file system that refuses O_DIRECT (tmpfs) gets buffered writes from the same thread. The thread is not
    a daemon: a script that ends without close() still finishes its last file (temporary name, then rename)."""

    def __init__(self):
        self._direct = hasattr(os, "O_DIRECT")
        self._arenas = [None, None]
        self._turn = 0
        self._thread = None
        self._result = None  # (path, error) of the write in flight, set by the thread

    def _arena(self, size):
        need = (size + _PAGE - 1) // _PAGE * _PAGE
        a = self._arenas[self._turn]
        if a is None or len(a) < need:
            if a is not None:
                a.close()
            a = self._arenas[self._turn] = mmap.mmap(-1, max(need, _PAGE))
        self._turn ^= 1
        return a

    def submit(self, path, chunks, total):
        """Copies the chunks (bytes-likes) into a staging buffer now, and writes them to `path` in the thread."""
        arena = self._arena(total)
        view = memoryview(arena)
        off = 0
        for c in chunks:
            c = memoryview(c).cast("B")
            view[off:off + len(c)] = c
            off += len(c)
        view.release()
        self._thread = threading.Thread(target=self._run, args=(path, arena, total), name="ddplab_trace writer")
        self._thread.start()

    def wait(self):
        """Waits for the write in flight; returns its path, or raises what went wrong in it. None when idle."""
        t, self._thread = self._thread, None
        if t is None:
            return None
        t.join()
        path, error = self._result
        self._result = None
        if error is not None:
            raise error
        return path

    def done(self):
        return self._thread is None or not self._thread.is_alive()

    def _run(self, path, arena, total):
        d, base = os.path.split(path)
        tmp = os.path.join(d, "." + base + ".tmp")
        try:
            self._write(tmp, arena, total)
            os.replace(tmp, path)
            self._result = (path, None)
        except BaseException as e:  # reported by wait(), in the training's thread; no half-written file left
            self._result = (path, e)
            try:
                os.remove(tmp)
            except OSError:
                pass

    def _write(self, tmp, arena, total):
        if not (self._direct and self._write_direct(tmp, arena, total)):
            with open(tmp, "wb") as f:
                with memoryview(arena) as v:
                    f.write(v[:total])

    def _write_direct(self, tmp, arena, total):
        """O_DIRECT: whole pages from the page-aligned buffer, then the file cut to its length. False where the
        file system refuses it (it is then not tried again)."""
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        except OSError:
            self._direct = False
            return False
        try:
            padded = (total + _PAGE - 1) // _PAGE * _PAGE
            with memoryview(arena) as v:
                off = 0
                while off < padded:
                    n = os.write(fd, v[off:padded])
                    if n <= 0:
                        raise OSError("short write to %s" % tmp)
                    off += n
            os.ftruncate(fd, total)
        except OSError as e:
            os.close(fd)
            if e.errno == errno.EINVAL:  # alignment the device wants is not the page: buffered from now on
                self._direct = False
                return False
            raise
        os.close(fd)
        return True


def _bits(t):
    """A float32 tensor's bits as int32 (one flat view; a copy only where the tensor is not contiguous)."""
    return _local(t).detach().reshape(-1).view(torch.int32)


def _bits_equal(a, b):
    """Bit for bit the same float32 tensors (NaNs and the sign of zero included); b on the CPU."""
    a = _local(a)
    if a.shape != b.shape:
        return False
    if a.device.type != "cpu":
        a = a.cpu()
    return torch.equal(_bits(a), _bits(b))


def _safetensors_parts(tensors, metadata_text):
    """(header bytes with its 8-byte length, data size, total size) for [(name, cpu float32 tensor)]."""
    header = {}
    offset = 0
    for name, t in tensors:
        if t.dtype != torch.float32 or t.layout != torch.strided or t.device.type != "cpu":
            raise _Unrecordable("tensor '%s' is %s %s on %s, and the trace format holds dense float32 only "
                                "(an unknown tensor kind)" % (name, str(t.layout).replace("torch.", ""),
                                                              _dtype_name(t.dtype), t.device.type))
        n = t.numel() * 4
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"ddplab": metadata_text}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)  # safetensors pads the header to a multiple of 8 bytes
    head = len(text).to_bytes(8, "little") + text
    return head, offset, len(head) + offset


def _sparse_grad_params(module):
    """ids of the parameters whose gradient is sparse: Embedding/EmbeddingBag(sparse=True)'s weights."""
    ids = set()
    for m in module.modules():
        if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and getattr(m, "sparse", False):
            ids.add(id(m.weight))
    return ids


# ---------------------------------------------------------------------------------------------------------
# data.json: what each DataLoader yielded, from its sampler's indices.
# ---------------------------------------------------------------------------------------------------------
def _subset_chain(ds):
    """(base dataset under every Subset, [indices of each Subset, outermost first])."""
    from torch.utils.data import Subset

    chain = []
    while isinstance(ds, Subset):
        chain.append(ds.indices)
        ds = ds.dataset
    return ds, chain


def _as_int_list(indices):
    if hasattr(indices, "tolist"):
        indices = indices.tolist()
    return [operator.index(j) for j in indices]


def _subset_map(ds):
    """The base index of each index of `ds` (a Subset, maybe of Subsets), cached per dataset."""
    m = _SUBSET_MAPS.get(ds)
    if m is not None:
        return m
    base, chain = _subset_chain(ds)
    try:
        n = len(base)
    except TypeError:
        n = None
    m = _as_int_list(chain[-1])
    if n is not None:
        m = [j + n if j < 0 else j for j in m]
    for indices in reversed(chain[:-1]):
        m = [m[j] for j in _as_int_list(indices)]
    try:
        _SUBSET_MAPS[ds] = m
    except TypeError:  # not weak-referenceable
        pass
    return m


def _describe_sampler(s):
    from torch.utils.data import DistributedSampler

    if isinstance(s, DistributedSampler):
        return {"type": type(s).__name__, "num_replicas": int(s.num_replicas), "rank": int(s.rank),
                "seed": _jsonable(getattr(s, "seed", None)), "shuffle": bool(getattr(s, "shuffle", False)),
                "drop_last": bool(getattr(s, "drop_last", False))}
    return {"type": type(s).__name__}


class _Loader:
    """One DataLoader as this rank iterated it."""

    def __init__(self, lid, loader, it):
        from torch.utils.data import BatchSampler, DistributedSampler, IterableDataset

        ds = loader.dataset if loader is not None else it._dataset
        self.iterable = isinstance(ds, IterableDataset)
        base, chain = _subset_chain(ds)
        self.map = None
        if chain and not self.iterable:
            try:
                self.map = _subset_map(ds)
            except Exception:  # Subset indices that are not integers: no base indices to give
                self.iterable = True
        try:
            base_name = "%s/%d" % (type(base).__name__, len(base))
        except Exception:  # no len
            base_name = type(base).__name__
        digest = None
        if self.map is not None:
            a = array.array("q", self.map)
            if sys.byteorder != "little":  # pragma: no cover
                a.byteswap()
            digest = hashlib.blake2b(a.tobytes(), digest_size=8).hexdigest()
        try:
            subset_len = len(self.map) if self.map is not None else len(ds)
        except Exception:
            subset_len = None
        # The sampler that chose the indices: loader.sampler, unless a batch_sampler of the script's own.
        sampler = loader.sampler if loader is not None else it._index_sampler
        bs = loader.batch_sampler if loader is not None else None
        if bs is not None and not isinstance(bs, BatchSampler):
            desc = {"type": type(bs).__name__, "batch_sampler": True}
            inner = getattr(bs, "sampler", None)
            if isinstance(inner, DistributedSampler):
                desc["sampler"] = _describe_sampler(inner)
            sampler = inner
        else:
            desc = _describe_sampler(sampler)
        self.dist_sampler = sampler if isinstance(sampler, DistributedSampler) else None
        self.json = {"id": lid, "dataset": type(ds).__name__, "base": base_name, "subset_digest": digest,
                     "subset_len": subset_len, "sampler": desc, "epochs": []}


class _IterState:
    __slots__ = ("trace", "loader", "sampler_iter", "epoch", "pending", "__weakref__")

    def __init__(self, trace, loader, sampler_iter, epoch):
        self.trace, self.loader, self.sampler_iter, self.epoch = trace, loader, sampler_iter, epoch
        self.pending = collections.deque()  # index batches fetched (workers prefetch), not yet yielded


# ---------------------------------------------------------------------------------------------------------
# The recorder.
# ---------------------------------------------------------------------------------------------------------
class DDPTrace:
    """Records a DDP run for ddp_check. See the module docstring and docs/trace_format.md."""

    def __init__(self, ddp_model, optimizer, run_dir, every=1, max_bytes=DEFAULT_MAX_BYTES, full=False,
                 measure_order="auto", _lightning=None):
        # The argument checks: the only errors DDPTrace raises.
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("DDPTrace: torch.distributed is not initialised (call init_process_group first)")
        self._framework = _framework(ddp_model, optimizer)
        optimizer = _torch_optimizer(optimizer)
        if not hasattr(optimizer, "param_groups") or not hasattr(optimizer, "step"):
            raise TypeError("DDPTrace: the second argument must be a torch.optim optimizer, "
                            "got %s" % type(optimizer).__name__)
        if int(every) != every or every < 1:
            raise ValueError("DDPTrace: every must be a positive integer, got %r" % (every,))
        if not max_bytes > 0:
            raise ValueError("DDPTrace: max_bytes must be positive, got %r" % (max_bytes,))
        if measure_order not in ("auto", True, False):
            raise ValueError("DDPTrace: measure_order must be 'auto', True or False, got %r" % (measure_order,))
        self.ddp = ddp_model
        self.optimizer = optimizer
        self.every = int(every)
        self.max_bytes = int(max_bytes)
        # full=False (digests): each step file keeps what ddp_check replays from (the local gradients; the
        # parameters and the optimizer state once) and, of what it predicts (.grad after DDP, the parameters and
        # the state after each step), a digest it compares with its prediction; implied tensors (a zero prior
        # .grad, a grad_step equal to .grad, a param_before equal to the last param_after) are left out.
        # full=True writes every tensor. docs/trace_format.md, "Digests".
        self.full = bool(full)
        # measure_order: at close(), the all-reduce's addition order for each bucket size, measured on DDP's own
        # process group ("allreduce_order"): "auto" where it is unknown (every backend but Gloo), True also on
        # Gloo, False never. World sizes 1 and 2 need none (a + b = b + a).
        self.measure_order = measure_order
        self._order = None
        self._last_after_crc, self._last_after_step = None, None
        self._local_pool = {}        # (backward, parameter) -> a CPU buffer reused every step: no fresh pages
        self._writer = _StepWriter()
        self._in_flight = None       # the step whose file the writer is writing
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.backend = str(dist.get_backend())
        self.run_dir = os.path.abspath(run_dir)
        self.dir = os.path.join(self.run_dir, "rank%d" % self.rank)
        self._lightning = _lightning

        # Everything close() and the manifest read, so that a recorder stopped anywhere can still close.
        self._step = 0
        self._steps = []
        self._bytes = 0
        self._stopped = False
        self._stopped_info = None
        self._closed = False
        self._lock = threading.Lock()  # hooks of one backward may run on several device threads
        self._names, self._params, self._index = [], [], {}
        self._unchecked, self._unchecked_params, self._unchecked_buffers = [], [], []
        self._float_buffers, self._int_buffers = [], []
        self._groups, self._opt_coverage = [], {}
        self._handles = []
        self._fsdp = None            # fully_shard (FSDP2): the _Sharded model
        self._unsharded_hooked = {}  # FSDP2: id -> each unsharded parameter given a hook (kept alive: ids stay unique)
        self._original_step, self._step_fn = None, None
        self.device = "cpu"
        self._sqrt_exact = None
        self._buckets_initial, self._buckets_rebuilt = None, None
        self._hook_at_start = None
        self._powersgd_cache = []
        self._first_bucket_bytes = None
        self._first_ready = None
        self._fwd_sync = None        # require_backward_grad_sync at the last DDP forward since the last backward
        self._in_ddp_forward = False  # DDP's forward pre-hook ran, the module's has not yet
        self._module_forward = False  # the wrapped module's forward ran on its own since the last backward
        self._join_base = _JOIN_EVENTS[0]  # segments count the Join contexts entered and exited since DDPTrace()
        self._seg_c, self._seg_k = 0, 0
        self._averaging = []
        self._join_seen = False
        self._loaders = []
        self._loader_by_key = weakref.WeakKeyDictionary()
        self._loader_by_id = {}
        self._last_epoch = None      # the data.json epoch record that yielded the latest batch
        self._data_count = 0
        self._data_truncated = False
        self._data_written = (-1, 0)  # (epoch records, indices) at the last data.json write
        self._nonfinite_first = None  # the first NaN/inf seen, any step: {"step", "kind", "name"}
        self._outside = []           # (name, parameter): the module's float32 parameters DDP does not reduce
        self._outside_info = []      # their manifest entries
        self._outside_first = {}     # name -> digest at the first recorded step
        self._reset_step()

        internal = None
        self._not_recorded = None
        try:  # a model it cannot record: one line, recording stops, the training goes on
            ddp_model, why = _what_model(ddp_model)
            if why:
                self._not_recorded = why
                raise _Unrecordable(why)
            self.ddp = ddp_model
            self._classify(ddp_model, optimizer)
        except Exception as e:
            internal = e

        # One collective: rank 0's run id, and every rank's verdict on its directory.
        problem = None
        try:
            os.makedirs(self.dir, exist_ok=True)
            stale = sorted(f for f in os.listdir(self.dir)
                           if f == "manifest.json" or (f.startswith("step") and f.endswith(".safetensors")))
            if stale:
                problem = ("DDPTrace: %s already holds a trace (%s); give a new run directory or delete the old "
                           "one, runs are never mixed" % (self.dir, stale[0]))
        except OSError as e:
            problem = "DDPTrace: cannot create %s: %s" % (self.dir, e)
        mine = (os.urandom(8).hex(), problem)
        gathered = [None] * self.world_size
        try:
            if self.backend == "nccl" and torch.cuda.is_available():
                dev = next((p.device for p in self._params + self._unchecked_params if p.device.type == "cuda"),
                           None)
                with torch.cuda.device(dev if dev is not None else torch.cuda.current_device()):
                    dist.all_gather_object(gathered, mine)
            else:
                dist.all_gather_object(gathered, mine)
        except Exception as e:  # the same on every rank, or the run's own collectives fail too
            gathered = [mine] * self.world_size
            internal = internal or e
        self.run_id = gathered[0][0]
        problems = [g[1] for g in gathered if g[1]]
        if problems:
            raise ValueError(problem or problems[0])

        _OPEN.append(self)
        if _PENDING_STOP:  # a spy failed before this trace: it starts stopped (the line was written then)
            self._stopped = True
            self._stopped_info = {"step": 0, "why": _PENDING_STOP.pop()}
        elif internal is not None:
            self._stop_for(internal, "DDPTrace() setup")
        else:
            try:
                self._install(ddp_model, optimizer)
            except Exception as e:
                self._stop_for(e, "DDPTrace() setup")
        self._write_manifest_safe(False)

    def _classify(self, ddp_model, optimizer):
        """Which of DDP's parameters and the module's buffers are recorded; the optimizer's groups."""
        module = ddp_model.module
        if isinstance(ddp_model, _Sharded):
            self._fsdp = ddp_model
        # The parameters DDP's reducer manages, in its order (DDP's _build_params_for_reducer: the module's
        # parameters that require grad and are not in _ddp_params_and_buffers_to_ignore, shared ones once).
        # Those the format cannot hold (sparse gradients, not float32) are listed, not recorded.
        ignore = set(getattr(ddp_model, "parameters_to_ignore", None) or [])
        sparse = _sparse_grad_params(module)
        # torch 2.x keeps the module's parameters as DDP(...) found them: one added to the module since is not DDP's
        # (torch 1.13 keeps no such list).
        at_wrap = getattr(ddp_model, "_module_parameters", None)
        at_wrap = {id(p) for p in at_wrap} if isinstance(at_wrap, (list, tuple)) else None
        for name, p in module.named_parameters():
            added = at_wrap is not None and id(p) not in at_wrap and name not in ignore
            if not p.requires_grad or name in ignore or added:
                # Not DDP's: never all-reduced. Unfrozen later and stepped, it trains on each rank's own gradient.
                if p.dtype == torch.float32 and p.layout == torch.strided:
                    self._outside.append((name, p))
                    self._outside_info.append({"name": name, "shape": list(p.shape),
                                               "why": "parameters_to_ignore" if name in ignore
                                               else "added-after-ddp" if added else "frozen"})
                continue
            why = None
            if id(p) in sparse or p.layout != torch.strided:
                why = "sparse gradient"
            elif p.dtype != torch.float32:
                why = "%s parameter" % _dtype_name(p.dtype)
            if why is None:
                self._names.append(name)
                self._params.append(p)
            else:
                self._unchecked.append({"name": name, "shape": list(p.shape), "dtype": _dtype_name(p.dtype),
                                        "why": why})
                self._unchecked_params.append(p)
        self._index = {id(p): i for i, p in enumerate(self._params)}
        self._unchecked_ids = {id(p) for p in self._unchecked_params}
        all_params = self._params + self._unchecked_params
        if all_params:
            self.device = all_params[0].device.type

        for name, b in module.named_buffers():
            if b.dtype == torch.float32 and b.layout == torch.strided:
                self._float_buffers.append((name, b))
            elif not b.is_floating_point() and not b.is_complex() and b.layout == torch.strided:
                self._int_buffers.append((name, b))
            else:
                self._unchecked_buffers.append({"name": name, "shape": list(b.shape), "dtype": _dtype_name(b.dtype),
                                                "why": "%s buffer" % _dtype_name(b.dtype)})

        in_groups = set()
        for g in optimizer.param_groups:
            entry = {}
            for k, v in g.items():
                if k != "params":
                    entry[k] = _jsonable(v)
            idx = [self._index[id(p)] for p in g["params"] if id(p) in self._index]
            untracked = len(g["params"]) - len(idx)
            entry = dict([("params", idx)] + list(entry.items()))
            if untracked:
                entry["untracked_params"] = untracked  # frozen, ignored by DDP, unchecked or foreign
            self._groups.append(entry)
            in_groups.update(id(p) for p in g["params"])
        module_ids = {id(p) for p in module.parameters()}
        for info, (_, p) in zip(self._outside_info, self._outside):
            info["in_optimizer"] = id(p) in in_groups
        self._opt_coverage = {
            "missing_params": [i for i, p in enumerate(self._params) if id(p) not in in_groups],
            "missing_unchecked": [u["name"] for u, p in zip(self._unchecked, self._unchecked_params)
                                  if id(p) not in in_groups],
            "foreign_params": len(in_groups - module_ids),
        }

    def _install(self, ddp_model, optimizer):
        eng = getattr(torch.autograd.Variable, "_execution_engine", None)
        if eng is None or not hasattr(eng, "queue_callback"):
            raise _Unrecordable("this torch has no autograd engine queue_callback, so .grad after DDP's reduction "
                                "cannot be read")
        self._engine = eng
        for (name, p), info in zip(self._outside, self._outside_info):  # where the parameters DDP does not reduce start
            self._outside_first[name] = info["initial"] = _digest(p)
        all_params = self._params + self._unchecked_params
        self._sqrt_exact = _sqrt_is_ieee(all_params[0].device if all_params else "cpu")
        self._buckets_initial = self._bucket_layout()
        self._hook_at_start = _HookInfo(ddp_model, self._powersgd_cache)
        # The cap of the first bucket after the rebuild: dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB) on torch 1.13;
        # on torch 2.x only when bucket_cap_mb was left at its default (else bucket_cap_mb's bytes).
        first = getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", None)
        if getattr(ddp_model, "bucket_bytes_cap_default", True) is False:
            first = ddp_model.bucket_bytes_cap
        self._first_bucket_bytes = int(first) if first is not None else None

        # Hooks: on every DDP parameter (an unchecked one only says that a backward started). FSDP2's sharded
        # parameters take no part in autograd: the hooks go on the unsharded parameters FSDP all-gathers, from a
        # forward pre-hook on each FSDP module (it runs after FSDP's own, so they exist).
        if self._fsdp is not None:
            for _, sub, group in self._fsdp.groups:
                self._handles.append(sub.register_forward_pre_hook(self._make_unshard_hook(group)))
        else:
            for i, p in enumerate(self._params):
                self._handles.append(p.register_hook(self._make_grad_hook(i)))
            for p in self._unchecked_params:
                self._handles.append(p.register_hook(self._make_grad_hook(None)))
        try:
            self._handles.append(ddp_model.register_forward_pre_hook(self._forward_pre_hook, with_kwargs=True))
        except TypeError:  # torch 1.13: no with_kwargs
            self._handles.append(ddp_model.register_forward_pre_hook(self._forward_pre_hook))
        inner = getattr(ddp_model, "module", None)
        if isinstance(ddp_model, torch.nn.parallel.DistributedDataParallel) and isinstance(inner, torch.nn.Module):
            self._handles.append(inner.register_forward_pre_hook(self._module_pre_hook))

        # optimizer.step, wrapped on the instance as a bound method (LR schedulers re-wrap it through
        # __func__/__self__); the original is called unchanged.
        self._had_own_step = "step" in optimizer.__dict__
        self._original_step = optimizer.step
        trace = self

        def step(opt, *args, **kwargs):
            return trace._step_wrapper(*args, **kwargs)

        for attr in ("_with_counter", "_wrapped_by_lr_sched"):
            if getattr(self._original_step, attr, False):
                setattr(step, attr, True)
        self._step_fn = step
        optimizer.step = step.__get__(optimizer, type(optimizer))

        # zero_grad on the optimizer, the DDP model and its module: when it runs between two backwards of one
        # step's record (a GAN's generator pass through the discriminator after optimizerD.step(), before
        # netD.zero_grad()), the replay must clear .grad there too. Wrapped on the instance; the original runs.
        self._zero_grad_wrapped = []
        for obj in (optimizer, ddp_model, getattr(ddp_model, "module", None)):
            if obj is None or isinstance(obj, _Sharded) or any(o is obj for o, _, _ in self._zero_grad_wrapped):
                continue
            had_own = "zero_grad" in obj.__dict__
            original = obj.zero_grad

            def zero_grad(*args, _original=original, **kwargs):
                out = _original(*args, **kwargs)
                trace._on_zero_grad_safe()
                return out
            obj.zero_grad = zero_grad
            self._zero_grad_wrapped.append((obj, had_own, original))

    def _on_zero_grad_safe(self):
        try:
            self._on_zero_grad_body()
        except Exception as e:
            self._stop_for(e, "zero_grad wrapper")

    def _on_zero_grad_body(self):
        if self._stopped or self._closed or not self._backwards:
            return  # before the record's first backward: the prior .grad it takes then says it all
        none = [i for i, p in enumerate(self._params) if p.grad is None]
        event = {"before_backward": len(self._backwards), "set_to_none": len(none) == len(self._params)}
        if 0 < len(none) < len(self._params):
            event["none"] = none
        self._zero_grads.append(event)

    # ----- stopping -----
    def _stop(self, why, hint="", at_step=None):
        """Stops the recording for good: one line on stderr, "stopped" in the manifest; training goes on."""
        if self._stopped_info is not None:
            return
        at = self._step if at_step is None else at_step
        self._stopped = True
        self._stopped_info = {"step": at, "why": why}
        try:
            sys.stderr.write("ddplab_trace: %s at step %d; recording stopped%s\n" % (why, at, hint))
            sys.stderr.flush()
        except Exception:
            pass
        try:
            self._reset_step()
        except Exception:
            pass
        self._write_manifest_safe(False)

    def _stop_for(self, e, where):
        self._stop(_why(e, where))

    # ----- context manager -----
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:  # the manifest stays "complete": false: the rank did not finish
            self._finish_write()
            try:
                self._detach()
            except Exception as e:
                self._closed = True
                self._stop_for(e, "DDPTrace.__exit__")
            finally:
                if self in _OPEN:
                    _OPEN.remove(self)
            self._write_manifest_safe(False)
        return False

    # ----- per step -----
    def _recording(self):
        return not self._stopped and not self._closed and self._step % self.every == 0

    def _reset_step(self):
        self._backwards = []   # [{"sync": bool, "ready": [i...]}]
        self._cur_bw = None
        self._locals = []      # per backward: {i: tensor}
        self._prior = {}
        self._prior_zero = []  # full=False: parameters whose prior .grad was all +0.0 (named, not copied)
        self._prior_taken = False
        self._zero_grads = []  # zero_grad calls between this record's backwards
        self._inputs = []
        self._grad_snap = None
        self._grad_crc = None  # digest mode: {i: digest of .grad after DDP}, in place of _grad_snap
        self._before = None
        self._step_join = None
        self._nf = {}          # kind -> names (or forward indices, for "input") holding a NaN or an infinity

    def _note_nonfinite(self, kind, names):
        """Keeps which tensors of this step are not finite, and the run's first."""
        if not names:
            return
        self._nf.setdefault(kind, []).extend(names)
        if self._nonfinite_first is None:
            self._nonfinite_first = {"step": self._step, "kind": kind, "name": str(names[0])}

    def _forward_pre_hook(self, module, args, kwargs=None):
        if self._stopped or self._closed:
            return None
        try:
            self._forward_pre_hook_body(args, kwargs)
        except Exception as e:
            self._stop_for(e, "forward pre-hook")
        return None

    def _forward_pre_hook_body(self, args, kwargs):
        self._in_ddp_forward = True
        if not torch.is_grad_enabled():
            return  # evaluation forwards build no graph and are not recorded
        self._fwd_sync = bool(getattr(self.ddp, "require_backward_grad_sync", True))
        cfg = getattr(self.ddp, "_join_config", None)
        if cfg is not None and getattr(cfg, "enable", False):
            self._join_seen = True
            self._step_join = {"divide_by_initial_world_size":
                               bool(getattr(self.ddp, "_divide_by_initial_world_size", True))}
        self._note_input(args, kwargs)

    def _note_input(self, args, kwargs):
        """A training forward's batch: one fingerprint per sample, and whether it holds a NaN or an infinity."""
        if self._last_epoch is not None:
            self._last_epoch["training"] = True
        if self._recording():
            x = _first_tensor(args)
            if x is None and kwargs:
                x = _first_tensor(kwargs)
            fps = []
            if x is not None:
                xc = x.detach()
                if xc.device.type != "cpu":
                    xc = xc.cpu()
                if _nonfinite([("x", xc)]):
                    self._note_nonfinite("input", [len(self._inputs)])
                if xc.dim() == 0:
                    fps.append(_fingerprint(xc))
                else:
                    for j in range(xc.shape[0]):
                        fps.append(_fingerprint(xc[j]))
            self._inputs.append(fps)

    def _module_pre_hook(self, module, args):
        """On DDP's wrapped module: a forward that did not come through DDP's is ddp_model.module(x)."""
        if self._stopped or self._closed:
            return None
        try:
            via_ddp, self._in_ddp_forward = self._in_ddp_forward, False
            # (inside a backward: a recomputation, activation checkpointing over the whole module)
            if not via_ddp and torch.is_grad_enabled() and self._cur_bw is None:
                self._module_forward = True
                self._note_input(args, None)  # its batch is still the rank's data
        except Exception as e:
            self._stop_for(e, "module forward pre-hook")
        return None

    def _make_unshard_hook(self, group):
        def hook(module, args):
            if self._stopped or self._closed:
                return None
            try:
                for fp in group.fsdp_params:
                    up = fp.unsharded_param
                    if id(up) in self._unsharded_hooked or not up.requires_grad:
                        continue
                    self._unsharded_hooked[id(up)] = up
                    self._handles.append(up.register_hook(self._make_grad_hook(self._index.get(id(fp.sharded_param)))))
            except Exception as e:
                self._stop_for(e, "FSDP forward pre-hook")
            return None

        return hook

    def _make_grad_hook(self, i):
        def hook(grad):
            if not (self._stopped or self._closed):
                try:
                    with self._lock:
                        self._on_grad_locked(i, grad)
                except Exception as e:
                    self._stop_for(e, "parameter hook")
            return None

        return hook

    def _on_grad_locked(self, i, grad):
        rec = self._recording()
        if self._cur_bw is None:  # the first parameter this backward reached
            # DDP decides at forward whether the backward reduces (Reducer.prepare_for_backward): a backward
            # with no DDP forward since the previous one (the wrapped module called itself, or a second backward
            # of one graph) is not reduced.
            sync = self._fwd_sync
            self._fwd_sync = None
            self._cur_bw = {"sync": bool(sync), "ready": []}
            if sync is None:  # "module": the wrapped module's own forward ran; "none": no forward at all
                self._cur_bw["forward"] = "module" if self._module_forward else "none"
            self._module_forward = False
            self._backwards.append(self._cur_bw)
            self._locals.append({})
            self._engine.queue_callback(self._end_of_backward)
        if i is None:  # an unchecked parameter
            return
        self._cur_bw["ready"].append(i)
        if rec:
            if not self._prior_taken:
                # The step's first backward reached its first parameter: no AccumulateGrad of the step has run
                # yet, so every .grad is as the step found it (for each parameter, as it was when the step's
                # first backward reached it).
                self._prior_taken = True
                for j, p in enumerate(self._params):
                    if p.grad is None:
                        continue
                    if not self.full and not _bits(p.grad).any():  # every bit zero (+0.0): named, not copied
                        self._prior_zero.append(j)
                    else:
                        self._prior[j] = _cpu_copy(p.grad)
            if grad is not None:
                if self._fsdp is not None and grad.dtype in (torch.bfloat16, torch.float16):
                    grad = grad.float()  # FSDP2 under a 16-bit reduce_dtype: exact in float32; ddp_check reduces in it
                if grad.layout != torch.strided or grad.dtype != torch.float32:
                    raise _Unrecordable("the gradient of '%s' is %s %s (found mid-run), and the trace format holds "
                                        "dense float32 only" % (self._names[i], str(grad.layout).replace("torch.", ""),
                                                                _dtype_name(grad.dtype)))
                self._locals[-1][i] = self._keep_local(len(self._locals) - 1, i, grad)

    def _keep_local(self, k, i, grad):
        """A CPU copy of a local gradient: into the buffer kept for it (written before the next step reuses it)."""
        if self.full:
            return _cpu_copy(grad)
        buf = self._local_pool.get((k, i))
        if buf is None or buf.shape != grad.shape:
            buf = self._local_pool[(k, i)] = _cpu_copy(grad)
        else:
            buf.copy_(grad.detach())
        return buf

    def _full_step(self):
        """Whether this step's file holds every tensor: full=True, or the first step this rank records."""
        return self.full or (not self._steps and self._in_flight is None)

    def _digest_grads(self):
        """.grad after DDP as a digest: ddp_check predicts it bit for bit (Gloo on the CPU; no comm hook, or
        torch's allreduce, fp16 or bf16 compress); elsewhere the values are kept (compared allclose, or needed
        as the optimizer's input where the gradient is not predicted)."""
        if self._full_step() or self.backend != "gloo" or any(p.device.type != "cpu" for p in self._params):
            return False
        if self._fsdp is not None:
            return not self._fsdp_layout_safe()["not_modelled"]
        info = _HookInfo(self.ddp, self._powersgd_cache)
        if info.kind in ("fp16_compress_wrapper", "bf16_compress_wrapper"):
            return info.inner == "allreduce"
        return info.kind in (None, "allreduce", "fp16_compress", "bf16_compress")

    def _digest_params(self):
        """Parameters and state after the step as digests, except where ddp_check compares them allclose
        (Adam/AdamW under a torch whose float sqrt is not IEEE's)."""
        if self._full_step():
            return False
        return not (type(self.optimizer).__name__ in ("Adam", "AdamW") and self._sqrt_exact is False)

    def _end_of_backward(self):
        # Runs once the backward's graph ran, before the callbacks queued after it: DDP's finalize_backward,
        # queued by the reducer's hooks, which run after ours.
        if self._stopped or self._closed:
            return
        try:
            self._end_of_backward_body()
        except Exception as e:
            self._stop_for(e, "end-of-backward callback")

    def _end_of_backward_body(self):
        with self._lock:
            bw = self._cur_bw
            self._cur_bw = None
        if bw is None:
            return
        if bw["sync"]:
            if self._first_ready is None:
                self._first_ready = list(bw["ready"])
            if self._recording():
                self._engine.queue_callback(self._after_ddp)

    def _after_ddp(self):
        # Queued by _end_of_backward, so after DDP's finalize_backward: .grad is what DDP left.
        if self._stopped or self._closed:
            return
        try:
            self._after_ddp_body()
        except Exception as e:
            self._stop_for(e, "after-DDP callback")

    def _after_ddp_body(self):
        self._note_nonfinite("grad", _nonfinite((self._names[i], p.grad) for i, p in enumerate(self._params)))
        if self._digest_grads():
            self._grad_crc = {i: _digest(p.grad) for i, p in enumerate(self._params) if p.grad is not None}
            self._grad_snap = None
        else:
            self._grad_snap = {i: _cpu_copy(p.grad) for i, p in enumerate(self._params) if p.grad is not None}
            self._grad_crc = None

    def _snapshot_before(self):
        opt = self.optimizer
        # Digests (full=False): parameters equal to where the last recorded step left them, and a .grad equal to
        # what DDP left, are named, not copied.
        follows = not self.full and self._last_after_step == self._step - 1 and self._last_after_crc is not None
        if follows and self._params and all(_digest(p) == self._last_after_crc[i] for i, p in enumerate(self._params)):
            params = "previous"
        else:
            params = {i: _cpu_copy(p) for i, p in enumerate(self._params)}
        live = {i: p.grad for i, p in enumerate(self._params) if p.grad is not None}
        if self.full or not live:
            same = False
        elif self._grad_crc is not None:
            same = set(live) == set(self._grad_crc) and all(_digest(g) == self._grad_crc[i] for i, g in live.items())
        else:
            snap = self._grad_snap or {}
            same = set(live) == set(snap) and all(_bits_equal(g.detach(), snap[i]) for i, g in live.items())
        grads = "grad" if same else {i: _cpu_copy(g) for i, g in live.items()}
        if params != "previous":
            self._note_nonfinite("param_before", _nonfinite((self._names[i], t) for i, t in params.items()))
        if grads != "grad":
            self._note_nonfinite("grad_step", _nonfinite((self._names[i], t) for i, t in grads.items()))
        # The state before this step is what the optimizer left after the previous one: a digest where ddp_check
        # predicted that step (it replays the optimizer from the first recorded step's state).
        state_digest = follows and self._digest_params()
        state, steps, skipped = [], {}, []
        for i, p in enumerate(self._params):
            st = opt.state.get(p) if hasattr(opt.state, "get") else None
            if not st:
                continue
            for k, v in st.items():
                if k == "step":
                    steps[self._names[i]] = _number(v)
                elif isinstance(v, torch.Tensor) and v.dim() > 0:
                    if v.dtype != torch.float32 or v.layout != torch.strided:
                        skipped.append({"name": self._names[i], "key": str(k), "dtype": _dtype_name(v.dtype)})
                        continue
                    key = "state/%s/%s" % (self._names[i], k)
                    state.append((key, _digest(v) if state_digest else _cpu_copy(v)))
        lr = [float(_number(g["lr"])) for g in opt.param_groups]
        # Every hyperparameter as step() will read it (a scheduler or a loop may have changed momentum, betas,
        # weight_decay, ... since DDPTrace was made): per group, the keys whose value differs from the manifest's.
        groups = []
        for g, first in zip(opt.param_groups, self._groups):
            now = {k: _jsonable(v) for k, v in g.items() if k != "params"}
            groups.append({k: v for k, v in now.items() if first.get(k, None) != v})
        bufs = [("buffer/" + n, _cpu_copy(b)) for n, b in self._float_buffers]
        ints = {}
        for n, b in self._int_buffers:
            ints[n] = int(b.item()) if b.numel() == 1 else b.detach().cpu().tolist()
        self._before = {"params": params, "grads": grads, "state": state, "steps": steps, "lr": lr, "groups": groups,
                        "num_groups": len(opt.param_groups),
                        "buffers": bufs, "ints": ints, "skipped": skipped}

    def _snapshot_before_safe(self):
        if self._stopped:
            return
        try:
            with torch.no_grad():
                self._snapshot_before()
        except Exception as e:
            self._before = None
            self._stop_for(e, "optimizer.step wrapper")

    def _step_wrapper(self, *args, **kwargs):
        if self._stopped or self._closed:
            return self._original_step(*args, **kwargs)
        call_args, call_kwargs, rec = args, kwargs, False
        try:
            rec, call_args, call_kwargs = self._before_step(args, kwargs)
        except Exception as e:
            self._stop_for(e, "optimizer.step wrapper")
            call_args, call_kwargs = args, kwargs
        try:
            out = self._original_step(*call_args, **call_kwargs)
        except BaseException:  # the script's own error: passes through unchanged
            try:
                self._reset_step()
            except Exception:
                pass
            raise
        if not self._stopped:
            try:
                self._after_step(rec)
            except Exception as e:
                self._stop_for(e, "optimizer.step wrapper")
        return out

    def _before_step(self, args, kwargs):
        # The segment of uneven steps: Join contexts entered and exited so far, and the step's index in it.
        c = _JOIN_EVENTS[0] - self._join_base
        if c != self._seg_c:
            self._seg_c, self._seg_k = c, 0
        ep = self._last_epoch  # the loader iteration that fed this step
        if ep is not None:
            if ep["first_step"] is None:
                ep["first_step"] = self._step
            ep["last_step"] = self._step
        rec = self._recording()
        if not rec:
            return rec, args, kwargs
        closure = kwargs.get("closure", args[0] if args else None)
        if closure is None:
            self._snapshot_before_safe()
            return rec, args, kwargs
        taken = []

        def traced_closure(*cargs, **ckwargs):
            out = closure(*cargs, **ckwargs)
            if not taken:
                taken.append(True)
                self._snapshot_before_safe()
            return out

        if "closure" in kwargs:
            return rec, args, dict(kwargs, closure=traced_closure)
        return rec, (traced_closure,) + tuple(args[1:]), kwargs

    def _after_step(self, rec):
        if rec and self._before is not None:
            with torch.no_grad():
                self._write_step()
        else:
            if self._nonfinite_first is None:  # a step not recorded: its parameters' health still is
                with torch.no_grad():
                    bad = _nonfinite(zip(self._names, self._params))
                if bad:
                    self._nonfinite_first = {"step": self._step, "kind": "param_after", "name": bad[0]}
                    self._write_manifest_safe(False)
            if self._in_flight is not None and self._writer.done():
                self._finish_write()  # with every=K: the manifest lists a finished file at the next step
        self._step += 1
        self._seg_k += 1
        self._reset_step()

    def _finish_write(self):
        """Waits for the file in flight; lists its step in the manifest once it is whole. False when it failed
        (recording then stops, named at that step)."""
        step, self._in_flight = self._in_flight, None
        if step is None:
            return True
        try:
            self._writer.wait()
        except Exception as e:
            self._stop(_why(e, "step writer"), at_step=step)
            return False
        self._steps.append(step)
        self._write_manifest_safe(False)
        return True

    def _write_step(self):
        if not self._finish_write() or self._stopped:  # the manifest listing the last file may have failed
            return
        b = self._before
        names = self._names
        tensors = []
        for k, loc in enumerate(self._locals):
            for i in self._backwards[k]["ready"]:  # each parameter is reached once per backward
                if i in loc:
                    tensors.append(("local/%d/%s" % (k, names[i]), loc[i]))
        self._note_nonfinite("local", _nonfinite((key[len("local/"):], t) for key, t in tensors))
        self._note_nonfinite("param_after", _nonfinite(zip(names, self._params)))
        elided = {}
        for i in sorted(self._prior):
            tensors.append(("prior/" + names[i], self._prior[i]))
        if self._prior_zero:
            elided["prior_zero"] = [names[i] for i in self._prior_zero]
        crc = {}  # digests of what ddp_check predicts, in place of the tensors
        if self._grad_snap is not None:
            for i in sorted(self._grad_snap):
                tensors.append(("grad/" + names[i], self._grad_snap[i]))
        elif self._grad_crc is not None:
            for i in sorted(self._grad_crc):
                crc["grad/" + names[i]] = self._grad_crc[i]
        if b["grads"] == "grad":
            elided["grad_step"] = "grad"
        else:
            for i in sorted(b["grads"]):
                tensors.append(("grad_step/" + names[i], b["grads"][i]))
        if b["params"] == "previous":
            elided["param_before"] = "previous"
        else:
            for i in range(len(names)):
                tensors.append(("param_before/" + names[i], b["params"][i]))
        if self._digest_params():
            after_crc = [_digest(p) for p in self._params]
            for i in range(len(names)):
                crc["param_after/" + names[i]] = after_crc[i]
        else:
            after = [_cpu_copy(p) for p in self._params]
            after_crc = None if self.full else [_digest(t) for t in after]
            for i in range(len(names)):
                tensors.append(("param_after/" + names[i], after[i]))
        for key, v in b["state"]:
            if isinstance(v, int):
                crc[key] = v
            else:
                tensors.append((key, v))
        tensors.extend(b["buffers"])
        # The parameters DDP does not reduce: a digest each step, and their values once they have changed.
        outside = {}
        for name, p in self._outside:
            d = _digest(p)
            outside[name] = d
            if self._outside_first.setdefault(name, d) != d or self.full:
                tensors.append(("outside/" + name, _cpu_copy(p)))
        meta = {
            "step": self._step, "rank": self.rank, "run_id": self.run_id,
            "segment": [self._seg_c, self._seg_k],
            "backwards": [dict(bw, ready=list(bw["ready"])) for bw in self._backwards],
            "inputs": self._inputs,
            "state_steps": b["steps"],
            "lr": b["lr"],
            "group_changes": b["groups"],
            "zero_grads": list(self._zero_grads),
            "num_groups": b["num_groups"],
            "int_buffers": b["ints"],
        }
        if self._step_join is not None:
            meta["join"] = self._step_join
        if b["skipped"]:
            meta["state_skipped"] = b["skipped"]
        if elided:
            meta["elided"] = elided
        meta["nonfinite"] = self._nf  # {} : every tensor of the step was finite
        if outside:
            meta["outside"] = outside
        meta["digest"] = "fold64"  # how "crc32" below and ddp_check's digests of this file's tensors are taken
        if crc:
            meta["crc32"] = crc  # the key's name predates fold64
        head, data_size, total = _safetensors_parts(tensors, json.dumps(meta, separators=(",", ":")))
        if self._bytes + total > self.max_bytes:
            self._stop("size bound %d bytes reached" % self.max_bytes, " (use every=K or max_bytes=...)")
            return
        path = os.path.join(self.dir, "step%06d.safetensors" % self._step)
        self._writer.submit(path, [head] + [_tensor_bytes(t) for _, t in tensors], total)
        self._in_flight = self._step
        self._bytes += total
        self._last_after_crc, self._last_after_step = after_crc, self._step

    # ----- spies' reports -----
    def _on_averaged(self, group_size):
        self._averaging.append({"after_step": self._step - 1, "group_size": int(group_size)})

    def _data_on_index(self, it, idx):
        st = _ITER_STATE.get(it)
        if st is None or st.trace is not self or st.sampler_iter is not it._sampler_iter:
            # A new iteration (iter(loader); persistent workers reuse the iterator with a new sampler iterator).
            ref = _ITER_LOADER.get(it)
            loader = ref() if ref is not None else None
            key = loader if loader is not None else it._index_sampler
            try:
                lr = self._loader_by_key.get(key)
            except TypeError:  # not weak-referenceable: by id (kept alive by the iterator meanwhile)
                key = id(key)
                lr = self._loader_by_id.get(key)
            if lr is None:
                lr = _Loader(len(self._loaders), loader, it)
                self._loaders.append(lr)
                if isinstance(key, int):
                    self._loader_by_id[key] = lr
                else:
                    self._loader_by_key[key] = lr
            epochs = lr.json["epochs"]
            ds = lr.dist_sampler
            ep = {"iteration": len(epochs), "epoch": int(ds.epoch) if ds is not None else None,
                  # int64 array: 8 bytes an index (a list of Python ints costs 36)
                  "indices": None if lr.iterable else array.array("q"), "training": False, "first_step": None,
                  "last_step": None}
            epochs.append(ep)
            st = _IterState(self, lr, it._sampler_iter, ep)
            _ITER_STATE[it] = st
        if st.epoch["indices"] is not None:
            st.pending.append(idx)

    def _data_on_yield(self, it):
        st = _ITER_STATE.get(it)
        if st is None or st.trace is not self:
            return
        self._last_epoch = st.epoch
        if not st.pending:
            return
        idx = st.pending.popleft()
        ep = st.epoch
        if ep["indices"] is None or self._data_truncated:
            return
        batch = idx if isinstance(idx, (list, tuple)) else [idx]
        try:
            batch = [operator.index(j) for j in batch]
            m = st.loader.map
            if m is not None:
                batch = [m[j] for j in batch]
        except (TypeError, IndexError):  # keys that are not indices into the dataset
            ep["indices"] = None
            return
        if self._data_count + len(batch) > MAX_DATA_INDICES:
            self._data_truncated = True
            return
        ep["indices"].extend(batch)
        self._data_count += len(batch)

    # ----- the manifest and data.json -----
    def _bucket_layout(self):
        """torch's buckets as lists of recorded parameter indices (unchecked ones left out, emptied buckets
        dropped), or None where torch does not expose them."""
        try:
            buckets = self.ddp.reducer._get_zeros_like_grad_buckets()
            layout = []
            for b in buckets:
                idx = []
                for p in b.parameters():
                    if id(p) in self._unchecked_ids:
                        continue
                    if id(p) not in self._index:
                        return None
                    idx.append(self._index[id(p)])
                if idx:
                    layout.append(idx)
            return layout
        except Exception:
            return None

    def _ddp_options(self):
        """The manifest's "ddp" options and torch's bucket layouts (DDP, not FSDP2)."""
        ddp = self.ddp
        info = _HookInfo(ddp, self._powersgd_cache)
        state = dict(info.fields)
        start = self._hook_at_start
        if info.kind is not None and start is not None and start.name == info.name:
            # fields only readable at the start: the seed; post-local SGD's iter at DDPTrace()
            state = dict(start.fields, **state)
            if "iter" in start.fields:
                state["iter"] = start.fields["iter"]
        static = getattr(ddp, "static_graph", None)
        if static is None:
            static = getattr(ddp, "_static_graph", False)
        ddp_opts = {
            "bucket_cap_mb": ddp.bucket_bytes_cap / 2.0 ** 20,
            "broadcast_buffers": bool(ddp.broadcast_buffers),
            "find_unused_parameters": bool(ddp.find_unused_parameters),
            "gradient_as_bucket_view": bool(ddp.gradient_as_bucket_view),
            "static_graph": bool(static),
            "comm_hook": info.kind,
            "comm_hook_state": state,
        }
        if info.name is not None:
            ddp_opts["comm_hook_name"] = info.name
            ddp_opts["comm_hook_module"] = info.module
        if info.kind in ("fp16_compress_wrapper", "bf16_compress_wrapper"):
            ddp_opts["comm_hook_inner"] = info.inner
        if self._first_bucket_bytes is not None:
            ddp_opts["first_bucket_bytes"] = self._first_bucket_bytes
        buckets = {}
        if self._buckets_initial is not None:
            buckets["initial"] = self._buckets_initial
        if self._buckets_rebuilt is None and getattr(ddp, "_has_rebuilt_buckets", False) and not self._stopped:
            self._buckets_rebuilt = self._bucket_layout()  # once: it allocates a zero copy of every gradient
        if self._buckets_rebuilt is not None:
            buckets["rebuilt"] = self._buckets_rebuilt
        return ddp_opts, buckets

    def _manifest(self, complete):
        if self._not_recorded:  # a model it cannot record: the reason, and nothing else
            return {"format": FORMAT, "version": VERSION, "run_id": self.run_id, "rank": self.rank,
                    "world_size": self.world_size, "backend": self.backend, "torch_version": torch.__version__,
                    "complete": bool(complete), "not_recorded": self._not_recorded, "every": self.every, "steps": []}
        ddp_opts, buckets = self._ddp_options() if self._fsdp is None else (None, {})
        optimizer = {"class": type(self.optimizer).__name__, "param_groups": self._groups}
        optimizer.update(self._opt_coverage)
        manifest = {
            "format": FORMAT, "version": VERSION,
            "run_id": self.run_id,
            "rank": self.rank, "world_size": self.world_size, "backend": self.backend, "device": self.device,
            "torch_version": torch.__version__,
            "complete": bool(complete),
            "stopped": self._stopped_info,
            "sqrt_exact": self._sqrt_exact,
            "every": self.every,
            "steps": list(self._steps),
            "params": [_param_entry(n, p) for n, p in zip(self._names, self._params)],
            "unchecked_params": self._unchecked,
            "outside_params": self._outside_info,
            "nonfinite_first": self._nonfinite_first,
            "buffers": [{"name": n, "shape": list(b.shape), "dtype": "float32"} for n, b in self._float_buffers],
            "unchecked_buffers": self._unchecked_buffers,
            "optimizer": optimizer,
            "first_ready_order": self._first_ready,
            "averaging": list(self._averaging),
            "join": self._join_seen,
            "lightning": self._lightning,
            "framework": self._framework,
            "env": {k: v for k, v in sorted(os.environ.items())
                    if k.startswith("NCCL_") or k == "TORCH_DISTRIBUTED_DEBUG"},
        }
        if ddp_opts is not None:
            manifest["ddp"] = ddp_opts
        else:
            manifest["fsdp"] = self._fsdp_layout_safe()
        if buckets:
            manifest["buckets"] = buckets
        if self._order is not None:
            manifest["allreduce_order"] = self._order
        return manifest

    def _fsdp_layout_safe(self):
        """The layout; where reading it fails (after one good read), the last good one and one line: the steps
        recorded so far stay checkable."""
        try:
            self._fsdp_last = self._fsdp_layout()
        except Exception as e:
            if getattr(self, "_fsdp_last", None) is None:
                raise
            self._stop_for(e, "manifest writer")
        return self._fsdp_last

    def _fsdp_layout(self):
        """The manifest's "fsdp" (docs/trace_format.md): FSDP2's parameter groups in their reduce-scatter order, each
        parameter's full shape and shard dim, and what ddp_check does not model in this run (its gradients are then
        compared by nothing but the optimizer step)."""
        full, groups, not_modelled = [None] * len(self._names), [], []

        def say(why):
            if why not in not_modelled:
                not_modelled.append(why)

        for name, _, g in self._fsdp.groups:
            idx, reduce = [], set()
            for fp in g.fsdp_params:
                i = self._index.get(id(fp.sharded_param))
                if i is None:
                    continue
                mp = getattr(fp, "mp_policy", None)
                param_dtype, reduce_dtype = getattr(mp, "param_dtype", None), getattr(mp, "reduce_dtype", None)
                if param_dtype not in (None, torch.float32, torch.bfloat16, torch.float16):
                    say("mixed precision (MixedPrecisionPolicy(param_dtype=%s))" % _dtype_name(param_dtype))
                # The dtype the gradient is reduced (and accumulated) in. torch 2.15 says it once FSDP is initialised
                # (the first forward): unsharded_grad_dtype, reduce_dtype or else the parameter's own. Before 2.15,
                # reduce_dtype=None meant param_dtype (2.15's MixedPrecisionPolicy docstring says so).
                try:
                    reduce_dtype = fp.unsharded_grad_dtype or torch.float32
                except AttributeError:
                    reduce_dtype = reduce_dtype or (None if hasattr(type(fp), "unsharded_grad_dtype") else param_dtype)
                    reduce_dtype = reduce_dtype or torch.float32
                if reduce_dtype not in (torch.float32, torch.bfloat16, torch.float16):
                    say("a %s reduce-scatter (MixedPrecisionPolicy(reduce_dtype=...))" % _dtype_name(reduce_dtype))
                reduce.add(_dtype_name(reduce_dtype))
                dim = int(getattr(getattr(fp, "fsdp_placement", None), "dim", 0) or 0)
                if getattr(fp, "offload_to_cpu", False):
                    say("CPU offload (CPUOffloadPolicy)")
                full[i] = {"name": self._names[i], "shape": list(fp.sharded_param.shape), "shard_dim": dim}
                idx.append(i)
            mesh = type(getattr(g, "mesh_info", None)).__name__
            if mesh != "FSDPMeshInfo":
                say("HSDP (%s: a 2-D device mesh, reduce-scatter then all-reduce)" % mesh)
            if getattr(g, "gradient_divide_factor", None) is not None:
                say("set_gradient_divide_factor")
            if getattr(g, "force_sum_reduction_for_comms", False):
                say("set_force_sum_reduction_for_comms")
            if len(reduce) > 1:
                say("reduce dtypes that differ within a parameter group")
            if idx:
                groups.append({"module": name, "params": idx, "reduce_dtype": reduce.pop()})
        if self.backend != "gloo" or self.device != "cpu":
            say("the reduce-scatter of %s on %s (only Gloo's on the CPU is modelled)" % (self.backend, self.device))
        for i, f in enumerate(full):
            if f is None:
                raise _Unrecordable("'%s' is in none of FSDP's parameter groups" % self._names[i])
        layout = {"params": full, "groups": groups, "not_modelled": not_modelled}
        mesh = getattr(self._fsdp.groups[0][2], "mesh_info", None) if self._fsdp.groups else None
        if getattr(mesh, "shard_mesh_size", None) is not None:  # HSDP shards within a group of the mesh's ranks
            layout["shard_world_size"] = int(mesh.shard_mesh_size)
            layout["shard_rank"] = int(mesh.shard_mesh_rank)
        return layout

    def _data_json(self):
        return {"loaders": [lr.json for lr in self._loaders], "truncated": self._data_truncated}

    def _write_manifest(self, complete):
        text = json.dumps(self._manifest(complete), indent=1).encode("utf-8") + b"\n"
        # data.json: rewritten with every manifest while small; past a million indices only when an iteration
        # began or the indices grew by a quarter since the last write (so the writes stay linear in the run).
        n_epochs = sum(len(lr.json["epochs"]) for lr in self._loaders)
        last_epochs, last_count = self._data_written
        if (complete or self._data_count <= 1_000_000 or n_epochs != last_epochs
                or self._data_count - last_count >= last_count // 4):
            data = json.dumps(self._data_json(), separators=(",", ":"), default=list).encode("utf-8") + b"\n"
            _write_atomically(os.path.join(self.dir, "data.json"), [data])
            self._data_written = (n_epochs, self._data_count)
        _write_atomically(os.path.join(self.dir, "manifest.json"), [text])

    def _write_manifest_safe(self, complete):
        try:
            self._write_manifest(complete)
        except Exception as e:
            self._stop_for(e, "manifest writer")  # a no-op once stopped

    # ----- the end -----
    def _detach(self):
        if self._closed:
            return
        self._closed = True
        if self in _OPEN:
            _OPEN.remove(self)
        for h in self._handles:
            h.remove()
        self._handles = []
        opt = self.optimizer
        if self._step_fn is not None and opt.__dict__.get("step") is not None and \
                getattr(opt.__dict__["step"], "__func__", None) is self._step_fn:
            if self._had_own_step:
                opt.step = self._original_step
            else:
                del opt.__dict__["step"]
        # else: something (an LR scheduler) wrapped our wrapper; it stays and passes calls straight through.
        for obj, had_own, original in getattr(self, "_zero_grad_wrapped", []):
            if had_own:
                obj.zero_grad = original
            else:
                obj.__dict__.pop("zero_grad", None)
        self._zero_grad_wrapped = []

    def close(self):
        """Stops recording and writes rank{r}/manifest.json ("complete": true) and data.json. Idempotent; never
        raises."""
        if self._closed:
            return
        self._finish_write()
        try:
            self._detach()
        except Exception as e:
            self._closed = True
            self._stop_for(e, "close()")
        finally:
            if self in _OPEN:
                _OPEN.remove(self)
        self._measure_order_safe()
        self._write_manifest_safe(True)

    # ----- the all-reduce's order (close()) -----
    def _order_sizes(self):
        """The distinct sizes of the buckets DDP all-reduced (both layouts), or None where unknown."""
        if self._buckets_rebuilt is None and getattr(self.ddp, "_has_rebuilt_buckets", False):
            self._buckets_rebuilt = self._bucket_layout()
        layouts = [b for b in (self._buckets_initial, self._buckets_rebuilt) if b]
        if not layouts:
            return None
        return sorted({sum(int(self._params[i].numel()) for i in bucket) for layout in layouts for bucket in layout})

    def _measure_order_safe(self):
        want = self.measure_order is True or (self.measure_order == "auto" and self.backend != "gloo")
        if not want or self.world_size < 3 or self._not_recorded or self._fsdp is not None:  # the same on every rank
            return
        t0 = time.monotonic()
        try:
            pg = getattr(self.ddp, "process_group", None)
            device = self._params[0].device if self._params else (
                torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu"))
            sizes, buf = None, None
            try:
                sizes = self._order_sizes()
                buf = torch.empty(max(sizes), dtype=torch.float32, device=device) if sizes else None
            except Exception as e:  # this rank says no: none measures (below), and this line says why
                sizes = None
                sys.stderr.write("ddplab_trace: the all-reduce order was not measured: %s\n"
                                 % _why(e, "order probes"))
            # The ranks agree first (every rank makes this call whatever it found): all measure, or none does.
            mine = [1.0 if sizes and buf is not None else 0.0, float(len(sizes or [])), float(sum(sizes or []))]
            agree = torch.tensor(mine + [-v for v in mine[1:]], dtype=torch.float64, device=device)
            dist.all_reduce(agree, op=dist.ReduceOp.MIN, group=pg)
            a = agree.cpu().tolist()
            if a[0] != 1.0 or a[1] != -a[3] or a[2] != -a[4]:
                self._order = {"measured": False, "why": "the ranks did not all know the same bucket sizes"}
                return
            N = dist.get_world_size(pg)
            rank = dist.get_rank(pg)
            sizes_out, calls = _measure_order(lambda t: dist.all_reduce(t, group=pg), sizes, N, rank, device, buf)
            failed = [e for e in sizes_out if e["runs"] is None and e.get("why", "").startswith("internal error")]
            if failed:  # this rank's own trouble (the others' entries are whole): one line
                sys.stderr.write("ddplab_trace: the all-reduce order of %d size(s) was not measured on this rank: "
                                 "%s\n" % (len(failed), failed[0]["why"]))
            self._order = {"measured": True, "seed": _ORDER_SEED, "sizes": sizes_out, "all_reduces": calls,
                           "seconds": round(time.monotonic() - t0, 3)}
        except Exception as e:  # one line; the trace itself is whole
            self._order = {"measured": False, "why": _why(e, "measuring the all-reduce order")}
            sys.stderr.write("ddplab_trace: the all-reduce order was not measured: %s\n" % _why(e, "close()"))


# ---------------------------------------------------------------------------------------------------------
# Lightning: Trainer(strategy="ddp", callbacks=[LightningCallback("runs/mine")]). Lightning wraps the
# LightningModule in DistributedDataParallel during setup and calls optimizer.step(closure) with the
# forward and backward inside the closure; DDPTrace handles both. Lightning is imported only when a callback
# is made. The class is made then (it must subclass Lightning's Callback) and is reachable as
# ddplab_trace._DDPTraceLightningCallback (module __getattr__), and its instances pickle as a call of
# LightningCallback(...): ddp_spawn sends the Trainer, callbacks included, to the spawned ranks.
# ---------------------------------------------------------------------------------------------------------
_LIGHTNING_CLASS = []


def _lightning_strategy(trainer):
    strategy = trainer.strategy
    flag = getattr(getattr(trainer, "_accelerator_connector", None), "_strategy_flag", None)
    start = getattr(strategy, "_start_method", None)
    if isinstance(flag, str):
        name = flag
    else:
        name = {"popen": "ddp", "spawn": "ddp_spawn", "fork": "ddp_fork"}.get(
            start, getattr(strategy, "strategy_name", type(strategy).__name__))
    return {"strategy": name, "start_method": start, "class": type(strategy).__name__}


def _lightning_callback_class():
    if _LIGHTNING_CLASS:
        return _LIGHTNING_CLASS[0]
    try:
        from lightning.pytorch import Callback
    except ImportError:  # the older package name
        from pytorch_lightning import Callback

    class _DDPTraceLightningCallback(Callback):
        """Traces the Trainer's DDP run into run_dir (the first optimizer only)."""

        def __init__(self, run_dir, every=1, max_bytes=DEFAULT_MAX_BYTES, full=False, measure_order="auto"):
            self.run_dir, self.every, self.max_bytes, self.full = run_dir, every, max_bytes, full
            self.measure_order = measure_order
            self.trace = None

        def __reduce__(self):
            return (LightningCallback, (self.run_dir, self.every, self.max_bytes, self.full, self.measure_order))

        def on_train_start(self, trainer, pl_module):
            try:
                ddp = trainer.strategy.model
                optimizer = trainer.optimizers[0] if trainer.optimizers else None
            except Exception as e:  # a Lightning this callback does not know: no trace, the run goes on
                _spy_failed("LightningCallback", e)
                return
            if not isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
                raise TypeError("ddplab_trace.LightningCallback: the Trainer's strategy did not wrap the model in "
                                "DistributedDataParallel (use a DDP strategy, e.g. strategy=\"ddp\", and devices >= 2)")
            if optimizer is None:
                _spy_failed("LightningCallback", _Unrecordable("the Trainer has no optimizer to trace"))
                return
            try:
                info = _lightning_strategy(trainer)
            except Exception:
                info = {"strategy": None}
            # DDPTrace raises only for its arguments (a directory holding a trace): on every rank alike.
            self.trace = DDPTrace(ddp, optimizer, self.run_dir, every=self.every, max_bytes=self.max_bytes,
                                  full=self.full, measure_order=self.measure_order, _lightning=info)

        def on_train_end(self, trainer, pl_module):
            t, self.trace = self.trace, None
            if t is not None:
                t.close()  # never raises

        def on_exception(self, trainer, pl_module, exception):
            t, self.trace = self.trace, None
            if t is not None:  # the manifest stays "complete": false, as with DDPTrace's `with`
                t.__exit__(type(exception), exception, None)  # never raises

    _DDPTraceLightningCallback.__module__ = __name__
    _DDPTraceLightningCallback.__qualname__ = "_DDPTraceLightningCallback"
    _LIGHTNING_CLASS.append(_DDPTraceLightningCallback)
    return _DDPTraceLightningCallback


def __getattr__(name):
    if name == "_DDPTraceLightningCallback":
        return _lightning_callback_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def LightningCallback(run_dir, every=1, max_bytes=DEFAULT_MAX_BYTES, full=False, measure_order="auto"):
    """A Lightning callback that traces the Trainer's DDP run into run_dir, as DDPTrace does a script's.

    Works with the DDP strategies that run on CPU ("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook") and on GPUs.
    Traces the first optimizer (a LightningModule with several optimizers: the first one only)."""
    return _lightning_callback_class()(run_dir, every, max_bytes, full, measure_order)
