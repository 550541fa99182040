"""A sync written by hand (and, beside DDP, the script's own all-reduces on top of it): the script's own collectives (torch.distributed's all_reduce, broadcast, all_gather,
reduce_scatter; sync or async), each recorded with what it was given and what it returned, and when an async one
was waited. Installed at import like the spies; with no hand-mode trace open each wrapper only calls the original.

A wrapper copies the input before it calls the original (so an async call's input is the tensor as handed over),
calls the original once with the arguments it got, and returns its result unchanged (the real Work: no proxy).
Work.wait is wrapped on torch's class: the output of an async collective is copied when the script waits for it,
before the script's next line can change the tensor (a division in place after the wait)."""

import torch
import torch.distributed as dist

from .common import _OPEN, _spy_failed

# torch.distributed's functions a hand-written sync calls, with the name the trace gives them.
_FUNCTIONS = {
    "all_reduce": "all_reduce",
    "broadcast": "broadcast",
    "all_gather": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "_all_gather_base": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter": "reduce_scatter",
}
# id(Work) -> (trace, record) for async collectives not yet waited (the record keeps the Work alive: ids stay unique)
_PENDING = {}


def _hand_trace():
    """The open trace that records the script's collectives now, or None: a sync written by hand (values kept), or a
    DDP model's (what they were, not their values: an all-reduce of .grad on top of DDP's is named). Not FSDP2's,
    whose own collectives are Python calls too."""
    t = _OPEN[-1] if _OPEN else None
    if t is None or t._stopped or t._closed or getattr(t, "_fsdp", None) is not None:
        return None
    return t if hasattr(t, "_collective_called") else None


def _reduce_op_name(op):
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        known = getattr(dist.ReduceOp, name, None)
        if known is not None:
            try:
                if op == known:
                    return name
            except Exception:
                continue
    return str(op)


def _call_args(kind, args, kwargs):
    """(input tensors, output tensors, reduce op, src) of a call, the outputs as they will hold the result."""
    def arg(i, name, default=None):
        return args[i] if len(args) > i else kwargs.get(name, default)
    if kind == "all_reduce":
        t = arg(0, "tensor")
        return [t], [t], _reduce_op_name(arg(1, "op", dist.ReduceOp.SUM)), None
    if kind == "broadcast":
        t = arg(0, "tensor")
        return [t], [t], None, int(arg(1, "src", 0))
    if kind == "all_gather":  # all_gather(tensor_list, tensor) or all_gather_into_tensor(output, input)
        out, inp = arg(0, "tensor_list", None), arg(1, "tensor", None)
        if out is None:
            out = kwargs.get("output_tensor", kwargs.get("output"))
        if inp is None:
            inp = kwargs.get("input_tensor", kwargs.get("input"))
        return [inp], (list(out) if isinstance(out, (list, tuple)) else [out]), None, None
    # reduce_scatter(output, input_list, op) or reduce_scatter_tensor(output, input, op)
    out, inp = arg(0, "output", None), arg(1, "input_list", None)
    if out is None:
        out = kwargs.get("output_tensor", kwargs.get("output"))
    if inp is None:
        inp = kwargs.get("input", kwargs.get("input_tensor"))
    return (list(inp) if isinstance(inp, (list, tuple)) else [inp]), [out], _reduce_op_name(
        arg(2, "op", dist.ReduceOp.SUM)), None


def _make(kind, original):
    def collective(*args, **kwargs):
        trace = _hand_trace()
        record = None
        if trace is not None:
            try:
                ins, outs, op, src = _call_args(kind, args, kwargs)
                at = 3 if kind == "reduce_scatter" else 2  # the group's position; async_op's is the next
                group = args[at] if len(args) > at else kwargs.get("group")
                is_async = bool(args[at + 1] if len(args) > at + 1 else kwargs.get("async_op", False))
                record = trace._collective_called(kind, ins, outs, op, src, group, is_async)
            except Exception as e:
                _spy_failed("collective spy (%s)" % kind, e)
                record = None
        try:
            out = original(*args, **kwargs)
        except BaseException as e:  # the script's own error (torch 1.13's Gloo refuses ReduceOp.AVG): kept, re-raised
            if record is not None:
                try:
                    trace._collective_failed(record, e)
                except Exception as e2:
                    _spy_failed("collective spy (%s)" % kind, e2)
            raise
        if record is not None:
            try:
                if out is not None and record.get("async"):
                    _PENDING[id(out)] = (trace, record, out)
                else:
                    trace._collective_done(record, "returned")
            except Exception as e:
                _spy_failed("collective spy (%s)" % kind, e)
        return out
    return collective


def _install():
    for name, kind in _FUNCTIONS.items():
        for mod in (dist, getattr(dist, "distributed_c10d", None)):
            original = getattr(mod, name, None) if mod is not None else None
            if original is None or getattr(original, "_ddplab_spy", False):
                continue
            spy = _make(kind, original)
            spy._ddplab_spy = True
            spy.__wrapped__ = original
            spy.__name__ = getattr(original, "__name__", name)
            spy.__doc__ = getattr(original, "__doc__", None)
            setattr(mod, name, spy)
    work = getattr(getattr(torch._C, "_distributed_c10d", None), "Work", None)
    original = getattr(work, "wait", None)
    if original is None or getattr(original, "_ddplab_spy", False):
        return

    def wait(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if _PENDING:
            try:
                got = _PENDING.pop(id(self), None)
                if got is not None and got[2] is self:
                    got[0]._collective_done(got[1], "wait")
            except Exception as e:
                _spy_failed("Work.wait spy", e)
        return out
    wait._ddplab_spy = True
    wait.__wrapped__ = original
    try:
        work.wait = wait
    except Exception:  # a torch whose Work cannot be patched: an async output is then taken at the step
        pass


def _pending_at_step(trace):
    """At optimizer.step(): each of this trace's async collectives not yet waited: completed (its output taken
    now) or still running (a race: the step reads a tensor the collective may still write)."""
    for key, (t, record, work) in list(_PENDING.items()):
        if t is not trace:
            continue
        done = False
        try:
            done = bool(work.is_completed())
        except Exception:
            done = False
        record["waited"] = "completed-unwaited" if done else "running-at-step"
        record["done_before_step"] = False  # whatever it did, the script did not wait for it
        if done:
            t._collective_done(record, "completed-unwaited")
        del _PENDING[key]


def _forget(trace):
    for key in [k for k, v in _PENDING.items() if v[0] is trace]:
        del _PENDING[key]


try:
    _install()
except Exception:  # pragma: no cover - torch.distributed without these functions
    pass
