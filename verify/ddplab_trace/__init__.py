"""Records what PyTorch DistributedDataParallel did in a training script, for ddplab's ddp_check.

    from ddplab_trace import DDPTrace
    trace = DDPTrace(ddp_model, optimizer, "runs/mine")   # after DDP(...) (or fully_shard(model)), before the loop
    ...                                                   # the training loop, unchanged
    trace.close()                                         # or: with DDPTrace(...) as trace: ...

The format it writes is docs/trace_format.md: RUN_DIR/rank{r}/step{S:06d}.safetensors per optimizer step
recorded whole (the first ones), the later whole-run steps appended to RUN_DIR/rank{r}/steps.log, and
RUN_DIR/rank{r}/manifest.json and data.json (rewritten after the first steps, then at most once a second, final
at close()). Needs only torch (1.13 or 2.x), CPU/Gloo or CUDA/NCCL, mp.spawn or torchrun. A C compiler (`cc`)
makes a small CPU model's whole-run steps cheaper: _fast.c, compiled once per machine at its first use (fast.py),
reads each kind of tensor where it is in one pass; without one, numpy gives the same values (flat.py).

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


from .common import DEFAULT_MAX_BYTES, FORMAT, VERSION  # noqa: F401
from . import spies  # noqa: F401  (installs the spies)
from .trace import DDPTrace
from .lightning import LightningCallback, _lightning_callback_class

__all__ = ["DDPTrace", "LightningCallback"]


def __getattr__(name):
    if name == "_DDPTraceLightningCallback":
        return _lightning_callback_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
