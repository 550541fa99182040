"""DDPTrace's part for a sync written by hand (the model is no DistributedDataParallel): its hooks put first, the
script's own collectives as collectives.py reports them, and what the step file keeps of them
(docs/trace_format.md, "A sync written by hand")."""

import torch
import torch.distributed as dist

from .collectives import _forget, _pending_at_step

# Where a collective's tensor came from, as the step file names it.
_TARGETS = ("grad", "param", "buffer")


def _hooks_first(p, handle):
    """Puts the hook of `handle` first among p's tensor hooks, so that it sees the gradient backward computed even
    where the script's own hooks, registered earlier, change it or set .grad (torch calls a leaf's hooks in the
    insertion order of the dict it keeps them in)."""
    hooks = getattr(p, "_backward_hooks", None)
    if not hooks or handle.id not in hooks or next(iter(hooks)) == handle.id:
        return
    items = list(hooks.items())
    hooks.clear()
    hooks[handle.id] = dict(items)[handle.id]
    for k, v in items:
        if k != handle.id:
            hooks[k] = v


class _HandSync:
    """The collectives of one step: each call's kind, reduce op, tensor and when it ran; its input and output."""

    def _reset_collectives(self):
        self._colls = []      # per collective: its metadata (the step file's "collectives")
        self._coll_data = []  # per collective: [input copy, output copy] (None where not kept)

    def _whose(self, t):
        """("grad" | "param" | "buffer", parameter index or None) of the tensor a collective was given."""
        if not isinstance(t, torch.Tensor):
            return "buffer", None
        ptr, n = t.data_ptr(), t.numel()
        for i, p in enumerate(self._params):
            g = p.grad
            if g is not None and (t is g or (g.data_ptr() == ptr and g.numel() == n)):
                return "grad", i
            if t is p or (p.data_ptr() == ptr and p.numel() == n):
                return "param", i
        return "buffer", None

    def _collective_called(self, kind, ins, outs, op, src, group, is_async):
        """A collective the script calls: its record (None when this step is not recorded)."""
        if not self._recording():
            return None
        with self._lock:
            in_backward = self._cur_bw is not None
            n_bw = len(self._backwards)
        target, i = self._whose(ins[0])
        rec = {"op": kind, "async": bool(is_async), "numel": int(sum(t.numel() for t in ins)),
               "shape": list(ins[0].shape), "target": target,
               "in_backward": in_backward, "backwards_done": n_bw - (1 if in_backward else 0),
               "in_step": self._before is not None}
        if op is not None:
            rec["reduce_op"] = op
        if src is not None:
            rec["src"] = src
        if i is not None:
            rec["param"] = self._names[i]
        if group is not None and group is not getattr(dist.group, "WORLD", None):
            rec["group"] = "other"  # a subgroup: recorded, not replayed
        dtypes = {t.dtype for t in ins + outs}
        keep = (self._hand and not self._whole_run() and dtypes == {torch.float32}
                and all(t.layout == torch.strided for t in ins))
        if dtypes != {torch.float32}:
            rec["dtype"] = str(sorted(str(d) for d in dtypes)[0]).replace("torch.", "")
        data = [None, None]
        if keep:
            data[0] = torch.cat([t.detach().reshape(-1).to("cpu", copy=True) for t in ins])
            rec["_outs"] = outs
        with self._lock:
            rec["index"] = len(self._colls)
            self._colls.append(rec)
            self._coll_data.append(data)
        return rec

    def _collective_done(self, rec, how):
        """Its result is there ("returned", "wait", or "completed-unwaited" at the step): the output copied."""
        rec.setdefault("waited", how)
        rec.setdefault("done_before_step", self._before is None)
        outs = rec.pop("_outs", None)
        idx = rec.get("index", -1)
        if outs is not None and 0 <= idx < len(self._coll_data) and self._colls[idx] is rec:
            self._coll_data[idx][1] = torch.cat([t.detach().reshape(-1).to("cpu", copy=True) for t in outs])

    def _collective_failed(self, rec, e):
        """The script's collective raised: the call and torch's error go into the manifest now (the run ends)."""
        if self._collective_error is None:
            first = (str(e).strip().splitlines() or [""])[0][:300]  # torch appends its C++ stack on later lines
            err = {"step": self._step, "op": rec["op"], "error": "%s: %s" % (type(e).__name__, first)}
            for k in ("reduce_op", "param"):
                if k in rec:
                    err[k] = rec[k]
            self._collective_error = err
            self._write_manifest_safe(False)

    def _collectives_at_step(self):
        """optimizer.step() is about to read .grad: every async collective not waited is completed or still running."""
        _pending_at_step(self)

    def _collective_parts(self):
        """(metadata list, tensors) of this step's collectives for the step file; those whose step ended before they
        did are left without an output."""
        meta, tensors = [], []
        for rec, (x, y) in zip(self._colls, self._coll_data):
            rec.pop("_outs", None)
            m = {k: v for k, v in rec.items() if not k.startswith("_")}
            m.setdefault("waited", "not-waited")
            m["kept"] = x is not None and y is not None
            meta.append(m)
            if m["kept"]:
                tensors.append(("coll/%d/in" % rec["index"], x))
                tensors.append(("coll/%d/out" % rec["index"], y))
        return meta, tensors

    def _forget_collectives(self):
        _forget(self)
