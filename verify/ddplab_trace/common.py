"""Shared by every part of the recorder: the format's constants, the open traces and how a fault of the
recorder becomes one line, and small helpers."""

import sys

import torch



FORMAT = "ddplab-trace"
VERSION = 1
DEFAULT_MAX_BYTES = 2 << 30  # per rank
MAX_DATA_INDICES = 10_000_000  # per rank, all loaders together (data.json)
# Recorded steps a rank keeps whole (its local gradients, every tensor ddp_check replays) before the whole-run
# mode: from then on a step keeps no local gradient and digests only, a few bytes per tensor, so a run of any
# length is recorded to its end (full=True keeps every step whole).
FULL_STEPS = 10
# ... or fewer for a large model: as many as fit in FULL_BYTES a rank, the first step at 16 bytes per parameter
# (local gradients, .grad, the parameters before and after) and each later one at 4 (local gradients), at least 2.
# Reckoned from the parameter count, the same on every rank, so that every rank switches at the same step (FSDP2,
# whose shards differ by rank, keeps FULL_STEPS).
FULL_BYTES = 192 << 20
# After its first FULL_STEPS listed steps a rank rewrites manifest.json (and data.json) at most once a this many
# seconds, not after every step; a rank killed outright leaves the steps of its last second unlisted.
MANIFEST_SECONDS = 1.0

try:  # only to know whether Tensor.numpy() works
    import numpy

    _HAVE_NUMPY = numpy is not None
except Exception:  # pragma: no cover - torch without numpy
    _HAVE_NUMPY = False


class _Unrecordable(Exception):
    """Something the trace format cannot hold: recording stops with this message as the reason."""

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
    if _HAVE_NUMPY:
        try:  # a contiguous tensor's memory as it is (a small model's step writes a dozen: no reshape)
            a = (t if t.is_contiguous() else t.contiguous()).numpy().reshape(-1)
            if sys.byteorder != "little":  # pragma: no cover
                a = a.byteswap()
            return memoryview(a).cast("B")
        except Exception:
            pass
    t = t.contiguous().reshape(-1)
    return bytes(t.reshape(-1).view(torch.uint8).tolist())  # pragma: no cover - no numpy, or bfloat16
