"""DDPTrace's whole-run steps laid flat (flat.py, fast.py): where record.py and step.py take each tensor's digest,
weighted sums, NaN/inf flag and sample one by one, these take them for every parameter of a kind at once."""

import numpy as np
import torch

from .common import _HAVE_NUMPY
from .digests import _digest


class _FlatSteps:
    """The flat path of a whole-run step of DDP (not FSDP2's shards) on a small CPU model."""

    def _flat_whole(self):
        """The flat layout where this step is laid flat, else None (the per-tensor path)."""
        if not self._wsumming():
            return None
        fl = getattr(self, "_flat", None)
        if fl is None:
            fl = False
            if _HAVE_NUMPY:
                from .flat import FAST_MAX_ELEMENTS, FAST_MAX_PARAMS, _Flat, _flat_layout_ok
                if _flat_layout_ok(self._params, FAST_MAX_ELEMENTS, FAST_MAX_PARAMS):
                    from .fast import _fast_layout
                    fl = _fast_layout(self._params)
                if not fl and _flat_layout_ok(self._params):
                    fl = _Flat(self._params)
            self._flat = fl
        return fl or None

    def _flat_names(self, mask):
        return [self._names[i] for i in np.flatnonzero(mask)] if mask.any() else []

    def _prior_flat(self, fl):
        """The step's first backward reached its first parameter: every .grad as the step found it."""
        from .flat import ABSOLUTE, DIGEST, FLAGS, WSUM
        sample = self._sampling()
        b = fl.buf("prior")
        b.put_all(((j, p.grad) for j, p in enumerate(self._params) if p.grad is not None),
                  DIGEST | WSUM | ABSOLUTE | FLAGS)
        if not b.present.any():
            return
        sample.put("prior", b)
        zero = b.bits_zero() & b.present  # every bit zero (+0.0): named, not digested
        self._prior_zero.extend(np.flatnonzero(zero).tolist())
        keep = b.present & ~zero
        if keep.any():  # (all zeros, as zero_grad(set_to_none=False) leaves them: named only)
            digests = b.digests()
            for j in np.flatnonzero(keep).tolist():
                self._prior[j] = digests[j]
            self._wsum["prior"] = (b.wsums(), keep)

    def _local_flat(self, fl, k, i, grad):
        """Backward k's local gradient of parameter i, as its hook sees it."""
        from .flat import ABSOLUTE, WSUM
        if getattr(self, "_flat_local_at", None) != (self._step, k):  # the backward's first: last step's are gone
            self._flat_local_at = (self._step, k)
            self._sampling()  # (the step's slots, which fast.py reads as it passes)
            self._flat_local_buf = fl.buf("local/%d" % k)
            self._flat_local_buf.present[:] = False
        self._flat_local_buf.put(i, grad, WSUM | ABSOLUTE)

    def _locals_flat_done(self, fl):
        """At the step's write: each backward's local gradients, their weighted sums, flags and sample."""
        for k, bw in enumerate(self._backwards):
            b = fl.buf("local/%d" % k)
            if not bw["ready"]:
                continue
            ws = b.wsums()
            self._wsum["local/%d" % k] = (ws, b.present.copy())
            bad = b.present & ~np.isfinite(ws[:, 0])
            if bad.any():  # in the order the hooks saw them, as the per-tensor path names them
                self._note_nonfinite("local", ["%d/%s" % (k, self._names[i]) for i in bw["ready"] if bad[i]])
            self._sampling().put("local/%d" % k, b)

    def _after_ddp_flat(self, fl):
        """.grad after DDP: its weighted sums (S also its NaN/inf flag), digests and sample."""
        from .flat import DIGEST, WSUM
        sample = self._sampling()
        b = fl.buf("grad")
        b.put_all(((i, p.grad) for i, p in enumerate(self._params) if p.grad is not None), DIGEST | WSUM)
        ws = b.wsums(absolute=False)
        self._wsum["grad"] = (ws, b.present.copy())
        self._note_nonfinite("grad", self._flat_names(b.present & ~np.isfinite(ws[:, 0])))
        digests = b.digests()
        self._grad_crc = {i: digests[i] for i in np.flatnonzero(b.present).tolist()}
        self._flat_grad_step = self._step
        sample.put("grad", b)
        self._grad_snap = None

    def _before_flat(self, fl, follows):
        """Before optimizer.step(): (params, grads) as _snapshot_before keeps them ("previous", "grad" or
        {i: digest}), the parameters and .grad laid flat."""
        from .flat import ABSOLUTE, DIGEST, FLAGS, WSUM
        sample = self._sampling()
        pb = fl.buf("param_before")
        pb.put_all(enumerate(self._params), DIGEST)
        sample.put("param_before", pb)
        pa = fl.bufs.get("param_after")
        if follows and pa is not None and getattr(self, "_flat_after_step", None) == self._step - 1:
            same = pb.same_as(pa)  # as the last step left them
        else:
            same = follows and pb.digests() == list(self._last_after_crc)
        if same:
            params = "previous"
        else:  # changed outside the step: its digests, and whether it is finite
            pb.more(FLAGS)
            self._note_nonfinite("param_before", self._flat_names(~pb.finite()))
            params = dict(enumerate(pb.digests()))
        gs = fl.buf("grad_step")
        gs.put_all(((i, p.grad) for i, p in enumerate(self._params) if p.grad is not None), DIGEST)
        sample.put("grad_step", gs)
        gb = fl.bufs.get("grad")
        same = (self._grad_crc is not None and getattr(self, "_flat_grad_step", None) == self._step
                and gs.present.any() and gs.same_as(gb))
        if same:
            return params, "grad"
        gs.more(WSUM | ABSOLUTE)
        ws = gs.wsums()  # against .grad after DDP's: one factor (a clip) or another change (wsum_check.h)
        self._wsum["grad_step"] = (ws, gs.present.copy())
        self._note_nonfinite("grad_step", self._flat_names(gs.present & ~np.isfinite(ws[:, 0])))
        digests = gs.digests()
        return params, {i: digests[i] for i in np.flatnonzero(gs.present).tolist()}

    def _state_flat(self, fl, entries):
        """entries [(i, key, tensor)] of the float32 state before the step: digests [(i, key, digest)] and the
        sample as state/<key>; a tensor not shaped as its parameter is digested alone (its slots absent)."""
        from .flat import DIGEST
        sample = self._sampling()
        by_key, out = {}, []
        for i, k, v in entries:
            if tuple(v.shape) == fl.shapes[i] and v.is_contiguous():
                by_key.setdefault(k, []).append((i, v))
                out.append((i, k, None))
            else:
                out.append((i, k, _digest(v)))
        digests = {}
        for k, items in by_key.items():
            b = fl.buf("state/%s" % k)
            b.put_all(items, DIGEST)
            digests[k] = b.digests()
            sample.put("state/%s" % k, b)
        return [(i, k, digests[k][i] if d is None else d) for i, k, d in out]

    def _after_flat(self, fl):
        """After optimizer.step(): the parameters' digests and flags, and what the step left for the sample."""
        from .flat import DIGEST, FLAGS
        sample = self._sampling()
        pa = fl.buf("param_after")
        pa.put_all(enumerate(self._params), DIGEST | FLAGS)
        self._note_nonfinite("param_after", self._flat_names(~pa.finite()))
        sample.put("param_after", pa)
        by_key = {}
        for i, k, v in self._state_tensors():
            if k != "step" and v.dtype == torch.float32:
                by_key.setdefault(k, []).append((i, v))
        for k, items in by_key.items():  # laid flat where shaped as their parameters (a copy costs less than a gather each)
            if all(tuple(v.shape) == fl.shapes[i] and v.is_contiguous() for i, v in items):
                b = fl.buf("state_after/%s" % k)
                b.put_all(items, 0)
                sample.put("state_after/%s" % k, b)
            else:
                sample.put_tensors("state_after/%s" % k, items)
        self._flat_after_step = self._step
        return pa.digests()
