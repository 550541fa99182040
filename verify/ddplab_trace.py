"""Records what PyTorch DistributedDataParallel did in a training script, for ddplab's ddp_check.

    from ddplab_trace import DDPTrace
    trace = DDPTrace(ddp_model, optimizer, "runs/mine")   # after DDP(...), before the loop
    ...                                                   # the training loop, unchanged
    trace.close()                                         # or: with DDPTrace(...) as trace: ...

The format it writes is docs/trace_format.md: RUN_DIR/rank{r}/step{S:06d}.safetensors per recorded
optimizer step, RUN_DIR/rank{r}/manifest.json at close(). Needs only torch (1.13 or 2.x), CPU/Gloo or
CUDA/NCCL, mp.spawn or torchrun.

It only observes, so the run is bitwise the run without it: tensor hooks that return None, copies made
with .detach() and .clone()/.cpu(), no random numbers drawn (the run id comes from os.urandom on each
rank and rank 0's wins). It makes one collective of its own, in DDPTrace(): an all_gather_object that
shares the run id and every rank's verdict on its directory (so all ranks refuse together).

How each record is taken:
  local/{k}/{name}  a hook on each parameter (param.register_hook): it fires before AccumulateGrad and
                    so before DDP's reducer hook (a post hook of AccumulateGrad) sees the gradient.
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
  param_after/...   after the original step returned; then the file is written (temporary name, renamed).
  inputs            a forward pre-hook on the DDP module: BLAKE2b of each sample of its first tensor argument.
"""

import hashlib
import json
import os
import sys
import threading
import weakref

import torch
import torch.distributed as dist

__all__ = ["DDPTrace", "LightningCallback"]

FORMAT = "ddplab-trace"
VERSION = 1
DEFAULT_MAX_BYTES = 2 << 30  # per rank

try:  # only to know whether Tensor.numpy() works
    import numpy

    _HAVE_NUMPY = numpy is not None
except Exception:  # pragma: no cover - torch without numpy
    _HAVE_NUMPY = False


# ---------------------------------------------------------------------------------------------------------
# Communication hooks. torch 2.x keeps (hook, state) in ddp_model._comm_hooks; torch 1.13 gives the state to
# C++ and keeps only the hook's __qualname__ (in _get_ddp_logging_data()["comm_hook"]). So that the state
# (PowerSGD's options) is known on 1.13 too, importing this module wraps DistributedDataParallel's
# register_comm_hook to remember (hook, state) per DDP object; it calls the original unchanged.
# ---------------------------------------------------------------------------------------------------------
_REGISTERED_HOOKS = weakref.WeakKeyDictionary()


def _install_register_comm_hook_spy():
    try:
        from torch.nn.parallel import DistributedDataParallel as _DDP
    except Exception:  # pragma: no cover
        return
    original = _DDP.register_comm_hook
    if getattr(original, "_ddplab_spy", False):
        return

    def register_comm_hook(self, state, hook):
        try:
            _REGISTERED_HOOKS[self] = (hook, state)
        except Exception:
            pass
        return original(self, state, hook)

    register_comm_hook._ddplab_spy = True
    register_comm_hook.__doc__ = original.__doc__
    register_comm_hook.__wrapped__ = original
    _DDP.register_comm_hook = register_comm_hook


_install_register_comm_hook_spy()

# PowerSGDState keeps its random_seed only inside a numpy RandomState (and has __slots__), so importing this
# module also wraps PowerSGDState.__init__ to remember each state's random_seed (by id); it calls the original
# unchanged. For a state made before the import, random_seed is known only when its generator is still in
# the state RandomState(0) starts in (the default seed, not yet drawn from).
_POWERSGD_SEEDS = {}


def _install_powersgd_seed_spy():
    try:
        from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState
    except Exception:  # no numpy, or no such module
        return
    original = PowerSGDState.__init__
    if getattr(original, "_ddplab_spy", False):
        return

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        try:
            import inspect

            bound = inspect.signature(original).bind(self, *args, **kwargs)
            bound.apply_defaults()
            _POWERSGD_SEEDS[id(self)] = bound.arguments.get("random_seed")
        except Exception:
            pass

    __init__._ddplab_spy = True
    __init__.__wrapped__ = original
    __init__.__doc__ = original.__doc__
    PowerSGDState.__init__ = __init__


_install_powersgd_seed_spy()


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

_HOOK_KINDS = {
    "allreduce_hook": "allreduce",
    "fp16_compress_hook": "fp16_compress",
    "powerSGD_hook": "powerSGD",
    "batched_powerSGD_hook": "powerSGD",
}
_POWERSGD_FIELDS = ("matrix_approximation_rank", "start_powerSGD_iter", "min_compression_rate",
                    "use_error_feedback", "warm_start", "random_seed", "orthogonalization_epsilon",
                    "batch_tensors_with_same_shape")


class _Unrecordable(Exception):
    pass


def _hook_name(hook):
    name = getattr(hook, "__qualname__", None) or getattr(hook, "__name__", None)
    if name is None and hasattr(hook, "func"):  # functools.partial
        name = getattr(hook.func, "__qualname__", None) or getattr(hook.func, "__name__", None)
    return name if name is not None else type(hook).__name__


def _comm_hook_info(ddp_model):
    """(kind, raw name, state fields) of the registered comm hook, or (None, None, {})."""
    hook, state, name = None, None, None
    hooks = getattr(ddp_model, "_comm_hooks", None)  # torch 2.x: [(hook, state)]
    if hooks:
        hook, state = hooks[-1]
    elif ddp_model in _REGISTERED_HOOKS:
        hook, state = _REGISTERED_HOOKS[ddp_model]
    if hook is not None:
        name = _hook_name(hook)
    else:
        try:
            name = ddp_model._get_ddp_logging_data().get("comm_hook") or None
        except Exception:
            name = None
        if name is not None:  # registered before this module was imported: look for its PowerSGD state
            state = _find_powersgd_state(ddp_model) if "powerSGD" in name else None
    if name is None:
        # A builtin C++ hook (_register_builtin_comm_hook) leaves no name we can read: say nothing.
        return None, None, {}
    short = name.rsplit(".", 1)[-1]
    kind = _HOOK_KINDS.get(short, short)
    fields = {}
    if state is not None and kind == "powerSGD":
        for f in _POWERSGD_FIELDS:
            if f == "random_seed":
                seed = _powersgd_seed(state)
                if seed is not None:
                    fields[f] = _jsonable(seed)
            elif hasattr(state, f):
                fields[f] = _jsonable(getattr(state, f))
    return kind, name, fields


def _find_powersgd_state(ddp_model):
    try:
        import gc

        from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState
    except Exception:
        return None
    # type() and not isinstance(): isinstance would read __class__ of every object, which warns on some.
    found = [o for o in gc.get_objects() if issubclass(type(o), PowerSGDState)]
    return found[0] if len(found) == 1 else None


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


def _cpu_copy(t):
    """A CPU float32 copy of t that shares no memory with it (and is not touched by the run again)."""
    t = t.detach()
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


def _write_atomically(path, chunks):
    d, base = os.path.split(path)
    tmp = os.path.join(d, "." + base + ".tmp")
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


def _safetensors_parts(tensors, metadata_text):
    """(header bytes with its 8-byte length, [data chunks], total size) for [(name, cpu float32 tensor)]."""
    header = {}
    offset = 0
    for name, t in tensors:
        n = t.numel() * 4
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    header["__metadata__"] = {"ddplab": metadata_text}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)  # safetensors pads the header to a multiple of 8 bytes
    head = len(text).to_bytes(8, "little") + text
    return head, offset, len(head) + offset


# ---------------------------------------------------------------------------------------------------------
# The recorder.
# ---------------------------------------------------------------------------------------------------------
class DDPTrace:
    """Records a DDP run for ddp_check. See the module docstring and docs/trace_format.md."""

    def __init__(self, ddp_model, optimizer, run_dir, every=1, max_bytes=DEFAULT_MAX_BYTES):
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("DDPTrace: torch.distributed is not initialised (call init_process_group first)")
        if not (hasattr(ddp_model, "module") and hasattr(ddp_model, "reducer")):
            raise TypeError("DDPTrace: the first argument must be the DistributedDataParallel model, "
                            "got %s" % type(ddp_model).__name__)
        if not hasattr(optimizer, "param_groups") or not hasattr(optimizer, "step"):
            raise TypeError("DDPTrace: the second argument must be a torch.optim optimizer, "
                            "got %s" % type(optimizer).__name__)
        if int(every) != every or every < 1:
            raise ValueError("DDPTrace: every must be a positive integer, got %r" % (every,))
        if not max_bytes > 0:
            raise ValueError("DDPTrace: max_bytes must be positive, got %r" % (max_bytes,))
        eng = getattr(torch.autograd.Variable, "_execution_engine", None)
        if eng is None or not hasattr(eng, "queue_callback"):
            raise RuntimeError("DDPTrace: this torch has no autograd engine queue_callback; cannot record .grad "
                               "after DDP's reduction")
        self._engine = eng
        self.ddp = ddp_model
        self.optimizer = optimizer
        self.every = int(every)
        self.max_bytes = int(max_bytes)
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.backend = str(dist.get_backend())
        module = ddp_model.module

        # The parameters DDP's reducer manages, in its order (DDP's _build_params_for_reducer: the module's
        # parameters that require grad and are not in _ddp_params_and_buffers_to_ignore, shared ones once).
        ignore = set(getattr(ddp_model, "parameters_to_ignore", None) or [])
        self._names, self._params = [], []
        for name, p in module.named_parameters():
            if p.requires_grad and name not in ignore:
                self._names.append(name)
                self._params.append(p)
        if not self._params:
            raise ValueError("DDPTrace: the model has no parameter that requires grad")
        for name, p in zip(self._names, self._params):
            if p.dtype != torch.float32:
                raise ValueError("DDPTrace: parameter '%s' is %s; the trace format and ddp_check handle float32 "
                                 "parameters only" % (name, _dtype_name(p.dtype)))
        self._index = {id(p): i for i, p in enumerate(self._params)}
        self.device = self._params[0].device.type

        self._float_buffers, self._int_buffers = [], []
        for name, b in module.named_buffers():
            if b.dtype == torch.float32:
                self._float_buffers.append((name, b))
            elif not b.is_floating_point() and not b.is_complex():
                self._int_buffers.append((name, b))
            else:
                raise ValueError("DDPTrace: buffer '%s' is %s; the trace format handles float32 and integer "
                                 "buffers only" % (name, _dtype_name(b.dtype)))

        self._groups = []
        for g in optimizer.param_groups:
            entry = {}
            for k, v in g.items():
                if k != "params":
                    entry[k] = _jsonable(v)
            idx = [self._index[id(p)] for p in g["params"] if id(p) in self._index]
            untracked = len(g["params"]) - len(idx)
            entry = dict([("params", idx)] + list(entry.items()))
            if untracked:
                entry["untracked_params"] = untracked  # frozen or ignored by DDP: not recorded
            self._groups.append(entry)

        # One collective: rank 0's run id, and every rank's verdict on its directory.
        self.run_dir = os.path.abspath(run_dir)
        self.dir = os.path.join(self.run_dir, "rank%d" % self.rank)
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
        if self.backend == "nccl" and self._params[0].device.type == "cuda":
            with torch.cuda.device(self._params[0].device):
                dist.all_gather_object(gathered, mine)
        else:
            dist.all_gather_object(gathered, mine)
        self.run_id = gathered[0][0]
        problems = [g[1] for g in gathered if g[1]]
        if problems:
            raise ValueError(problem or problems[0])

        # State of the recording.
        self._step = 0
        self._steps = []
        self._bytes = 0
        self._stopped = False
        self._closed = False
        self._first_ready = None
        self._fwd_sync = None        # require_backward_grad_sync at the last DDP forward since the last backward
        self._seen_forward = False
        self._lock = threading.Lock()  # hooks of one backward may run on several device threads
        self._reset_step()
        self._buckets_initial = self._bucket_layout()
        self._hook_at_start = _comm_hook_info(ddp_model)
        # The cap of the first bucket after the rebuild: dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB) on torch 1.13;
        # on torch 2.x only when bucket_cap_mb was left at its default (else bucket_cap_mb's bytes).
        first = getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", None)
        if getattr(ddp_model, "bucket_bytes_cap_default", True) is False:
            first = ddp_model.bucket_bytes_cap
        self._first_bucket_bytes = int(first) if first is not None else None

        # Hooks.
        self._handles = []
        for i, p in enumerate(self._params):
            self._handles.append(p.register_hook(self._make_grad_hook(i)))
        try:
            self._handles.append(ddp_model.register_forward_pre_hook(self._forward_pre_hook, with_kwargs=True))
            self._pre_hook_kwargs = True
        except TypeError:  # torch 1.13: no with_kwargs
            self._handles.append(ddp_model.register_forward_pre_hook(self._forward_pre_hook))
            self._pre_hook_kwargs = False

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

    # ----- context manager -----
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self._detach()  # no manifest: it would say that the rank finished
        return False

    # ----- per step -----
    def _recording(self):
        return not self._stopped and not self._closed and self._step % self.every == 0

    def _reset_step(self):
        self._backwards = []   # [{"sync": bool, "ready": [i...]}]
        self._cur_bw = None
        self._locals = []      # per backward: {i: tensor}
        self._prior = {}
        self._prior_taken = False
        self._inputs = []
        self._grad_snap = None
        self._before = None

    def _forward_pre_hook(self, module, args, kwargs=None):
        if not torch.is_grad_enabled():
            return None  # evaluation forwards build no graph and are not recorded
        self._fwd_sync = bool(getattr(self.ddp, "require_backward_grad_sync", True))
        self._seen_forward = True
        if self._recording():
            x = _first_tensor(args)
            if x is None and kwargs:
                x = _first_tensor(kwargs)
            fps = []
            if x is not None:
                xc = x.detach()
                if xc.device.type != "cpu":
                    xc = xc.cpu()
                if xc.dim() == 0:
                    fps.append(_fingerprint(xc))
                else:
                    for j in range(xc.shape[0]):
                        fps.append(_fingerprint(xc[j]))
            self._inputs.append(fps)
        return None

    def _make_grad_hook(self, i):
        def hook(grad):
            if not self._closed:
                self._on_grad(i, grad)
            return None

        return hook

    def _on_grad(self, i, grad):
        with self._lock:
            self._on_grad_locked(i, grad)

    def _on_grad_locked(self, i, grad):
        rec = self._recording()
        if self._cur_bw is None:  # the first parameter this backward reached
            # DDP decides at forward whether the backward reduces (Reducer.prepare_for_backward): a backward
            # with no DDP forward since the previous one (ddp_model.module called directly) is not reduced.
            sync = self._fwd_sync
            if sync is None:
                sync = False if self._seen_forward else bool(getattr(self.ddp, "require_backward_grad_sync", True))
            self._fwd_sync = None
            self._cur_bw = {"sync": sync, "ready": []}
            self._backwards.append(self._cur_bw)
            self._locals.append({})
            self._engine.queue_callback(self._end_of_backward)
        self._cur_bw["ready"].append(i)
        if rec:
            if not self._prior_taken:
                # The step's first backward reached its first parameter: no AccumulateGrad of the step has run
                # yet, so every .grad is as the step found it (for each parameter, as it was when the step's
                # first backward reached it).
                self._prior_taken = True
                for j, p in enumerate(self._params):
                    if p.grad is not None:
                        self._prior[j] = _cpu_copy(p.grad)
            if grad is not None:
                self._locals[-1][i] = _cpu_copy(grad)

    def _end_of_backward(self):
        # Runs once the backward's graph ran, before the callbacks queued after it: DDP's finalize_backward,
        # queued by the reducer's hooks, which run after ours.
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
        self._grad_snap = {i: _cpu_copy(p.grad) for i, p in enumerate(self._params) if p.grad is not None}

    def _snapshot_before(self):
        opt = self.optimizer
        params = {i: _cpu_copy(p) for i, p in enumerate(self._params)}
        grads = {i: _cpu_copy(p.grad) for i, p in enumerate(self._params) if p.grad is not None}
        state, steps = [], {}
        for i, p in enumerate(self._params):
            st = opt.state.get(p) if hasattr(opt.state, "get") else None
            if not st:
                continue
            for k, v in st.items():
                if k == "step":
                    steps[self._names[i]] = _number(v)
                elif isinstance(v, torch.Tensor) and v.dim() > 0:
                    if v.dtype != torch.float32:
                        raise _Unrecordable("optimizer state '%s' of '%s' is %s, and the trace format holds "
                                            "float32 only" % (k, self._names[i], _dtype_name(v.dtype)))
                    state.append(("state/%s/%s" % (self._names[i], k), _cpu_copy(v)))
        lr = [float(_number(g["lr"])) for g in opt.param_groups]
        bufs = [("buffer/" + n, _cpu_copy(b)) for n, b in self._float_buffers]
        ints = {}
        for n, b in self._int_buffers:
            ints[n] = int(b.item()) if b.numel() == 1 else b.detach().cpu().tolist()
        self._before = {"params": params, "grads": grads, "state": state, "steps": steps, "lr": lr,
                        "buffers": bufs, "ints": ints}

    def _snapshot_before_or_stop(self):
        try:
            with torch.no_grad():
                self._snapshot_before()
        except _Unrecordable as e:  # found in the middle of a run: stop recording, not the training
            sys.stderr.write("ddplab_trace: %s at step %d; recording stopped\n" % (e, self._step))
            sys.stderr.flush()
            self._stopped = True
            self._before = None

    def _step_wrapper(self, *args, **kwargs):
        if self._closed:
            return self._original_step(*args, **kwargs)
        rec = self._recording()
        if rec:
            closure = kwargs.get("closure", args[0] if args else None)
            if closure is not None:
                taken = []

                def traced_closure(*cargs, **ckwargs):
                    out = closure(*cargs, **ckwargs)
                    if not taken:
                        taken.append(True)
                        self._snapshot_before_or_stop()
                    return out

                if "closure" in kwargs:
                    kwargs = dict(kwargs, closure=traced_closure)
                else:
                    args = (traced_closure,) + tuple(args[1:])
            else:
                self._snapshot_before_or_stop()
        try:
            out = self._original_step(*args, **kwargs)
        except BaseException:
            self._reset_step()
            raise
        if rec and self._before is not None:
            with torch.no_grad():
                self._write_step()
        self._step += 1
        self._reset_step()
        return out

    def _write_step(self):
        b = self._before
        names = self._names
        tensors = []
        for k, loc in enumerate(self._locals):
            for i in self._backwards[k]["ready"]:  # each parameter is reached once per backward
                if i in loc:
                    tensors.append(("local/%d/%s" % (k, names[i]), loc[i]))
        for i in sorted(self._prior):
            tensors.append(("prior/" + names[i], self._prior[i]))
        if self._grad_snap is not None:
            for i in sorted(self._grad_snap):
                tensors.append(("grad/" + names[i], self._grad_snap[i]))
        for i in sorted(b["grads"]):
            tensors.append(("grad_step/" + names[i], b["grads"][i]))
        for i in range(len(names)):
            tensors.append(("param_before/" + names[i], b["params"][i]))
        for i, p in enumerate(self._params):
            tensors.append(("param_after/" + names[i], _cpu_copy(p)))
        tensors.extend(b["state"])
        tensors.extend(b["buffers"])
        meta = {
            "step": self._step, "rank": self.rank, "run_id": self.run_id,
            "backwards": [{"sync": bw["sync"], "ready": list(bw["ready"])} for bw in self._backwards],
            "inputs": self._inputs,
            "state_steps": b["steps"],
            "lr": b["lr"],
            "int_buffers": b["ints"],
        }
        head, data_size, total = _safetensors_parts(tensors, json.dumps(meta, separators=(",", ":")))
        if self._bytes + total > self.max_bytes:
            sys.stderr.write("ddplab_trace: size bound %d bytes reached at step %d; recording stopped "
                             "(use every=K or max_bytes=...)\n" % (self.max_bytes, self._step))
            sys.stderr.flush()
            self._stopped = True
            return
        path = os.path.join(self.dir, "step%06d.safetensors" % self._step)
        try:
            _write_atomically(path, [head] + [_tensor_bytes(t) for _, t in tensors])
        except OSError as e:  # a full disk stops the recording, not the training
            sys.stderr.write("ddplab_trace: cannot write %s (%s); recording stopped\n" % (path, e))
            sys.stderr.flush()
            self._stopped = True
            return
        self._bytes += total
        self._steps.append(self._step)

    # ----- the end -----
    def _bucket_layout(self):
        """torch's buckets as lists of parameter indices, or None where torch does not expose them."""
        try:
            buckets = self.ddp.reducer._get_zeros_like_grad_buckets()
            layout = []
            for b in buckets:
                idx = []
                for p in b.parameters():
                    if id(p) not in self._index:
                        return None
                    idx.append(self._index[id(p)])
                layout.append(idx)
            return layout
        except Exception:
            return None

    def _detach(self):
        if self._closed:
            return
        self._closed = True
        for h in self._handles:
            h.remove()
        self._handles = []
        if self.optimizer.__dict__.get("step") is not None and \
                getattr(self.optimizer.__dict__["step"], "__func__", None) is self._step_fn:
            if self._had_own_step:
                self.optimizer.step = self._original_step
            else:
                del self.optimizer.__dict__["step"]
        # else: something (an LR scheduler) wrapped our wrapper; it stays and passes calls straight through.

    def close(self):
        """Stops recording and writes rank{r}/manifest.json. Idempotent."""
        if self._closed:
            return
        self._detach()
        ddp = self.ddp
        kind, raw, state = _comm_hook_info(ddp)
        if kind is not None and self._hook_at_start[1] == raw:  # fields only readable at the start (the seed)
            state = dict(self._hook_at_start[2], **state)
        static = getattr(ddp, "static_graph", None)
        if static is None:
            static = getattr(ddp, "_static_graph", False)
        ddp_opts = {
            "bucket_cap_mb": ddp.bucket_bytes_cap / 2.0 ** 20,
            "broadcast_buffers": bool(ddp.broadcast_buffers),
            "find_unused_parameters": bool(ddp.find_unused_parameters),
            "gradient_as_bucket_view": bool(ddp.gradient_as_bucket_view),
            "static_graph": bool(static),
            "comm_hook": kind,
            "comm_hook_state": state,
        }
        if raw is not None:
            ddp_opts["comm_hook_name"] = raw
        if self._first_bucket_bytes is not None:
            ddp_opts["first_bucket_bytes"] = self._first_bucket_bytes
        buckets = {}
        if self._buckets_initial is not None:
            buckets["initial"] = self._buckets_initial
        if getattr(ddp, "_has_rebuilt_buckets", False):
            layout = self._bucket_layout()
            if layout is not None:
                buckets["rebuilt"] = layout
        manifest = {
            "format": FORMAT, "version": VERSION,
            "run_id": self.run_id,
            "rank": self.rank, "world_size": self.world_size, "backend": self.backend, "device": self.device,
            "torch_version": torch.__version__,
            "sqrt_exact": _sqrt_is_ieee(self._params[0].device if self._params else "cpu"),
            "every": self.every,
            "steps": list(self._steps),
            "ddp": ddp_opts,
            "params": [{"name": n, "shape": list(p.shape), "dtype": "float32"}
                       for n, p in zip(self._names, self._params)],
            "buffers": [{"name": n, "shape": list(b.shape), "dtype": "float32"} for n, b in self._float_buffers],
            "optimizer": {"class": type(self.optimizer).__name__, "param_groups": self._groups},
            "first_ready_order": self._first_ready,
            "env": {k: v for k, v in sorted(os.environ.items())
                    if k.startswith("NCCL_") or k == "TORCH_DISTRIBUTED_DEBUG"},
        }
        if buckets:
            manifest["buckets"] = buckets
        text = json.dumps(manifest, indent=1).encode("utf-8") + b"\n"
        _write_atomically(os.path.join(self.dir, "manifest.json"), [text])


# ---------------------------------------------------------------------------------------------------------
# Lightning: Trainer(strategy="ddp", callbacks=[LightningCallback("runs/mine")]). Lightning wraps the
# LightningModule in DistributedDataParallel during setup and calls optimizer.step(closure) with the
# forward and backward inside the closure; DDPTrace handles both. Lightning is imported only here.
# ---------------------------------------------------------------------------------------------------------
def LightningCallback(run_dir, every=1, max_bytes=DEFAULT_MAX_BYTES):
    """A Lightning callback that traces the Trainer's DDP run into run_dir, as DDPTrace does a script's.

    Traces the first optimizer (a LightningModule with several optimizers: the first one only)."""
    try:
        from lightning.pytorch import Callback
    except ImportError:  # the older package name
        from pytorch_lightning import Callback

    class _DDPTraceCallback(Callback):
        def __init__(self):
            self.trace = None

        def on_train_start(self, trainer, pl_module):
            ddp = trainer.strategy.model
            if not isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
                raise RuntimeError("ddplab_trace.LightningCallback: the Trainer's strategy did not wrap the model in "
                                   "DistributedDataParallel (use strategy=\"ddp\" and devices >= 2)")
            self.trace = DDPTrace(ddp, trainer.optimizers[0], run_dir, every=every, max_bytes=max_bytes)

        def on_train_end(self, trainer, pl_module):
            if self.trace is not None:
                self.trace.close()
                self.trace = None

        def on_exception(self, trainer, pl_module, exception):
            if self.trace is not None:  # no manifest for a run that failed, as with DDPTrace's `with`
                self.trace._detach()
                self.trace = None

    return _DDPTraceCallback()

