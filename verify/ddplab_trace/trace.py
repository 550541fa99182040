"""DDPTrace: the recorder a learner makes, its checks, its hooks installed and removed, stop and close."""

import atexit
import os
import sys
import threading
import weakref

import torch
import torch.distributed as dist

from .common import DEFAULT_MAX_BYTES, _OPEN, _PENDING_STOP, _Unrecordable, _dtype_name, _jsonable, _why
from .data import _DataSpy
from .flat_steps import _FlatSteps
from .digests import _digest, _sqrt_is_ieee
from .hand import _HandSync, _hooks_first
from .hooks import _HookInfo
from .manifest import _Manifest
from .models import _Hand, _Sharded, _framework, _shard_of, _sparse_grad_params, _torch_optimizer, _what_model
from .record import _Record
from .spies import _JOIN_EVENTS
from .step import _Step
from .writer import _StepWriter


# ---------------------------------------------------------------------------------------------------------
def _held_trace(rank_dir):
    """The first trace file rank_dir already holds ("manifest.json", a step file), or None."""
    try:
        held = sorted(f for f in os.listdir(rank_dir)
                      if f in ("manifest.json", "steps.log") or (f.startswith("step") and f.endswith(".safetensors")))
    except OSError:
        return None
    return os.path.join(rank_dir, held[0]) if held else None


def _fresh_sibling(run_dir):
    """The first "<run_dir>-N" (N from 2) that does not exist yet, or None."""
    for n in range(2, 10000):
        candidate = "%s-%d" % (run_dir, n)
        if not os.path.exists(candidate):
            return candidate
    return None


def _exit_error():
    """What the exiting process is ending with, where it ends by an error ("" otherwise): the exception still
    propagating through a multiprocessing worker's last finally (torch's mp.spawn turns a worker's error into
    SystemExit(1)), or, at the interpreter's exit, the uncaught one (sys.last_value)."""
    e = sys.exc_info()[1] or getattr(sys, "last_value", None)
    if e is None or (isinstance(e, SystemExit) and e.code in (0, None)):
        return ""
    if isinstance(e, SystemExit):  # mp.spawn's worker: its own error is printed above, the worker exits 1
        return "exit status %s" % (e.code,)
    return ("%s: %s" % (type(e).__name__, e))[:300]


def _close_open_at_exit():
    """The process is exiting with traces still open (close() never called): each is finished where it can be."""
    error = _exit_error()
    for t in list(_OPEN):
        try:
            t._close_at_exit(error)
        except Exception:
            pass


def _hook_exit():
    """Once per process: _close_open_at_exit at the interpreter's exit (atexit) and at a multiprocessing child's
    (mp.spawn's workers end in os._exit after multiprocessing's own finalizers, not atexit's)."""
    if _EXIT_HOOKED:
        return
    _EXIT_HOOKED.append(os.getpid())
    atexit.register(_close_open_at_exit)
    try:
        import multiprocessing.util
        multiprocessing.util.Finalize(None, _close_open_at_exit, exitpriority=100)
    except Exception:
        pass


_EXIT_HOOKED = []


# The recorder.
# ---------------------------------------------------------------------------------------------------------
class DDPTrace(_Record, _FlatSteps, _Step, _Manifest, _DataSpy, _HandSync):
    """Records a DDP run for ddp_check. See the module docstring and docs/trace_format.md."""

    def __init__(self, ddp_model, optimizer, run_dir, every=1, max_bytes=DEFAULT_MAX_BYTES, full=False,
                 measure_order="auto", _lightning=None):
        # The argument checks: the only errors DDPTrace raises.
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("DDPTrace: torch.distributed is not initialised (call init_process_group first)")
        self._framework = _framework(ddp_model, optimizer)
        # A sharded optimizer (ZeRO-1): its inner optimizer's groups and state are recorded, this rank's share, and
        # the holder's step() is wrapped, so that the step's record includes the broadcasts after the shard's step.
        shard = _shard_of(optimizer, ddp_model) if isinstance(ddp_model, torch.nn.Module) else None
        self._shard = None
        if shard is not None:
            self._stepped, attr, optimizer = shard
            self._shard = {"by": type(self._stepped).__name__, "attribute": attr}
        else:
            optimizer = self._stepped = _torch_optimizer(optimizer)
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
        self._written = 0  # step files handed to the writer: FULL_STEPS of them whole, then the whole-run mode
        self._bytes = 0
        self._stopped = False
        self._stopped_info = None
        self._closed = False
        self._closed_at_exit = False  # close() never called: finished at the process's exit
        self._nowhere = False         # no directory to record in: nothing is written
        self._exit_error = ""         # closed at exit: the error the process ended with ("" : none)
        self._lock = threading.Lock()  # hooks of one backward may run on several device threads
        self._names, self._params, self._index = [], [], {}
        self._unchecked, self._unchecked_params, self._unchecked_buffers = [], [], []
        self._float_buffers, self._int_buffers = [], []
        self._groups, self._opt_coverage = [], {}
        self._handles = []
        self._fsdp = None            # fully_shard (FSDP2): the _Sharded model
        self._hand = False           # a sync written by hand (no DDP): the script's own collectives are recorded
        self._collective_error = None  # the first of the script's collectives that raised (the call, torch's error)
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
        self._data_written = -1  # the indices at the last data.json write
        self._manifest_at = 0.0       # time.monotonic() at the last manifest write
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
            self._hand = isinstance(ddp_model, _Hand)
            self._classify(ddp_model, optimizer)
        except Exception as e:
            internal = e

        # One collective: rank 0's run id, and every rank's verdict on its directory. A directory that already
        # holds a trace (the same script run again) is kept: every rank records beside it instead, in the first
        # "<run_dir>-N" rank 0 finds free (a second collective), named in one line. Runs are never mixed.
        mine = (os.urandom(8).hex(), _held_trace(self.dir))
        gathered = self._gather_object(mine)
        agreed = not isinstance(gathered, Exception)  # else no second collective: it would fail alike
        if not agreed:
            gathered, internal = [mine] * self.world_size, internal or gathered
        self.run_id = gathered[0][0]
        held = [g[1] for g in gathered if g[1]]
        if held:
            fresh = self._gather_object(_fresh_sibling(self.run_dir) if self.rank == 0 else None) if agreed else None
            fresh = fresh[0] if isinstance(fresh, list) else None
            if fresh is not None and self.rank == 0:
                sys.stderr.write("ddplab_trace: %s already holds a trace (%s): this run is recorded in %s instead "
                                 "(ddp_check %s)\n" % (self.run_dir, held[0], fresh, fresh))
                sys.stderr.flush()
            if fresh is None or _held_trace(os.path.join(fresh, "rank%d" % self.rank)):
                self._nowhere = True  # nothing is written: the old trace stays as it was
                internal = internal or _Unrecordable("%s already holds a trace and no fresh directory beside it "
                                                     "could be agreed on" % self.run_dir)
            else:
                self.run_dir = fresh
                self.dir = os.path.join(fresh, "rank%d" % self.rank)
        try:
            os.makedirs(self.dir, exist_ok=True)
        except OSError as e:
            internal = internal or _Unrecordable("cannot create %s: %s" % (self.dir, e))

        _OPEN.append(self)
        if _EXIT_HOOKED != [os.getpid()]:  # a forked child inherits the list, not the registrations
            _EXIT_HOOKED.clear()
        _hook_exit()
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

    def _gather_object(self, obj):
        """dist.all_gather_object of obj (on the model's device under NCCL); the exception when it fails."""
        gathered = [None] * self.world_size
        try:
            if self.backend == "nccl" and torch.cuda.is_available():
                dev = next((p.device for p in self._params + self._unchecked_params if p.device.type == "cuda"),
                           None)
                with torch.cuda.device(dev if dev is not None else torch.cuda.current_device()):
                    dist.all_gather_object(gathered, obj)
            else:
                dist.all_gather_object(gathered, obj)
        except Exception as e:  # the same on every rank, or the run's own collectives fail too
            return e
        return gathered

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
        if self._shard is not None:  # the other ranks step the rest: ddp_check sees every rank's share
            self._shard["owned"] = [i for i, p in enumerate(self._params) if id(p) in in_groups]
            in_groups |= {id(p) for p in self._params + self._unchecked_params}
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
                if self._hand:  # before the script's own hooks: the gradient backward computed, whatever they do
                    _hooks_first(p, self._handles[-1])
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
        optimizer, inner = self._stepped, optimizer
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
        for obj in (optimizer, inner, ddp_model, getattr(ddp_model, "module", None)):
            if obj is None or isinstance(obj, (_Sharded, _Hand)) or any(o is obj for o, _, _ in self._zero_grad_wrapped):
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
    def _detach(self):
        if self._closed:
            return
        self._closed = True
        if self in _OPEN:
            _OPEN.remove(self)
        try:
            self._writer.close()  # steps.log (its last record was waited for)
        except Exception:
            pass
        for h in self._handles:
            h.remove()
        self._handles = []
        self._forget_collectives()
        opt = self._stepped
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

    def _close_at_exit(self, error=""):
        """close() was never called and the process is exiting: the last step's file is finished and the manifest
        written ("closed_at_exit"), without close()'s collectives (the process group may be gone)."""
        if self._closed:
            return
        self._closed_at_exit = True
        self._exit_error = error
        self._finish_write()
        try:
            self._detach()
        except Exception:
            self._closed = True
        finally:
            if self in _OPEN:
                _OPEN.remove(self)
        self._write_manifest_safe(False)

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
