"""Lightning: the callback that traces a Trainer's DDP run."""


import torch

from .common import DEFAULT_MAX_BYTES, _Unrecordable, _spy_failed
from .trace import DDPTrace


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


def LightningCallback(run_dir, every=1, max_bytes=DEFAULT_MAX_BYTES, full=False, measure_order="auto"):
    """A Lightning callback that traces the Trainer's DDP run into run_dir, as DDPTrace does a script's.

    Works with the DDP strategies that run on CPU ("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook") and on GPUs.
    Traces the first optimizer (a LightningModule with several optimizers: the first one only)."""
    return _lightning_callback_class()(run_dir, every, max_bytes, full, measure_order)
