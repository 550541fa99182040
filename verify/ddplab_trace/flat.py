"""Whole-run steps of a small CPU model, laid flat: each kind of tensor (local gradients, .grad, the parameters,
each optimizer state key) copied end to end into one buffer, so that its digests, weighted sums, NaN/inf flags
and sample take a few numpy calls for all parameters at once instead of a dozen per tensor. A course's model
(tens of thousands of parameters, a few tensors) steps in about 3 ms: per-tensor Python would cost more than
the step (bench/README.md, "The recorder on a course-sized run").

What comes out is what the per-tensor functions give (digests.py, sample.py): the same fold64 digests bit for
bit, the same sample; the weighted sums S and A in float64 in another order (within the bound ddp_check allows
for float64 rounding, src/check/replay/wsum_check.cc), Q in float64."""

import zlib

import numpy as np
import torch

from .digests import _FOLD_COLUMNS, WSUM_COLUMNS
from .sample import SAMPLE_MULTIPLIER, SLOTS

FLAT_MAX_ELEMENTS = 4 << 20  # larger models: per-tensor (their step dwarfs the per-tensor calls)


def _flat_layout_ok(params):
    """Whether these parameters can be laid flat: dense contiguous float32 on the CPU, none empty, not too many."""
    total = 0
    for p in params:
        if (p.device.type != "cpu" or p.dtype != torch.float32 or p.layout != torch.strided
                or not p.is_contiguous() or p.numel() == 0):
            return False
        total += p.numel()
    return total <= FLAT_MAX_ELEMENTS


class _FlatBuf:
    """One kind's buffer: `a` (numpy float32, the layout's length, padding +0.0), `views` (torch, one per
    parameter, its shape) and which parameters it holds this step."""

    def __init__(self, layout):
        self.a = np.zeros(layout.length, dtype=np.float32)
        t = torch.from_numpy(self.a)
        self.views = [t[s:s + n].view(shape) for s, n, shape in zip(layout.starts, layout.sizes, layout.shapes)]
        self.present = np.zeros(len(layout.sizes), dtype=bool)

    def put(self, i, tensor):
        self.views[i].copy_(tensor.detach())
        self.present[i] = True

    def put_all(self, tensors):
        """[(i, tensor)]: those parameters' tensors (the others not present)."""
        self.present[:] = False
        for i, t in tensors:
            self.put(i, t)


class _Flat:
    """The layout: parameter i at starts[i] (even: its 64-bit words are its own), sizes[i] elements, padding to
    the next even offset +0.0 (the fold64 digest's odd last float is a word's low half, its high half zero)."""

    def __init__(self, params):
        self.sizes = [p.numel() for p in params]
        self.shapes = [tuple(p.shape) for p in params]
        self.starts, acc = [], 0
        for n in self.sizes:
            self.starts.append(acc)
            acc += n + (n & 1)
        self.length = acc
        self.bufs = {}
        nparams = len(self.sizes)
        # fold64: word j of parameter i goes to column j mod 1021 of row i. Words sorted by (row, column), summed
        # by runs (reduceat), each run's sum put at its (row, column).
        col, row = [], []
        for i, (s, n) in enumerate(zip(self.starts, self.sizes)):
            words = (n + 1) // 2
            col.append(np.arange(words, dtype=np.int64) % _FOLD_COLUMNS)
            row.append(np.full(words, i, dtype=np.int64))
        key = np.concatenate(row) * _FOLD_COLUMNS + np.concatenate(col)
        self._perm = np.argsort(key, kind="stable")
        sorted_key = key[self._perm]
        self._runs = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
        self._run_key = sorted_key[self._runs]
        self._rows = nparams
        # Weighted sums: element k of parameter i weighs w_(k mod 1021) (digests.py), padding 0.
        j = np.arange(WSUM_COLUMNS, dtype=np.int64)
        w = ((j * 2654435761) % (1 << 20)).astype(np.float64) / (1 << 20) + 1.0
        self._weights = np.zeros(self.length)
        for s, n in zip(self.starts, self.sizes):
            self._weights[s:s + n] = w[np.arange(n) % WSUM_COLUMNS]
        self._bounds = np.array(self.starts, dtype=np.int64)
        # The sample: slots over the parameters laid end to end without padding (sample.py).
        self._plain = np.cumsum([0] + self.sizes[:-1]).astype(np.int64)
        self._total = sum(self.sizes)
        self._pad_shift = np.array(self.starts, dtype=np.int64) - self._plain

    def buf(self, kind):
        """The buffer kept for `kind`, reused from step to step."""
        b = self.bufs.get(kind)
        if b is None:
            b = self.bufs[kind] = _FlatBuf(self)
        return b

    def digests(self, a):
        """fold64 digest of each parameter's elements in `a` (digests.py _digest), as ints."""
        words = a.view(np.uint64)
        sums = np.zeros(self._rows * _FOLD_COLUMNS, dtype=np.uint64)
        sums[self._run_key] = np.add.reduceat(words[self._perm], self._runs)  # wraps modulo 2^64
        raw = sums.astype("<u8").tobytes()
        step = 8 * _FOLD_COLUMNS
        return [zlib.crc32(raw[i * step:(i + 1) * step]) for i in range(self._rows)]

    def wsums(self, a, absolute=True):
        """[parameters, 3] float64: S = sum w_k x_k, A = sum w_k |x_k| (NaN where absolute=False), Q = sum x_k^2."""
        x = a.astype(np.float64)
        out = np.empty((self._rows, 3))
        with np.errstate(all="ignore"):  # an overflow or a NaN is a value to report, not a warning in the training
            out[:, 0] = np.add.reduceat(x * self._weights, self._bounds)
            out[:, 1] = np.add.reduceat(np.abs(x) * self._weights, self._bounds) if absolute else np.nan
            out[:, 2] = np.add.reduceat(x * x, self._bounds)
        return out

    def finite(self, a):
        """Per parameter: whether all its elements are finite (a float64 sum of float32 values cannot overflow)."""
        with np.errstate(all="ignore"):
            return np.isfinite(np.add.reduceat(a, self._bounds, dtype=np.float64))

    def bits_zero(self, a):
        """Per parameter: whether every bit of its elements is zero (+0.0 everywhere)."""
        return np.bitwise_or.reduceat(a.view(np.uint32), self._bounds) == 0

    def slots(self, step):
        """(parameter of each slot, its element's index in the padded buffer) for `step` (sample.py _plan)."""
        k = np.arange(SLOTS, dtype=np.int64)
        base = (step * SLOTS * SAMPLE_MULTIPLIER) % self._total
        flat = (base + k * (SAMPLE_MULTIPLIER % self._total)) % self._total
        owner = np.searchsorted(self._plain, flat, side="right") - 1
        return owner, flat + self._pad_shift[owner]


class _FlatSample:
    """A whole-run step's sample from flat buffers: the same slots and values as sample.py's _Sample."""

    def __init__(self, layout, step):
        self.layout = layout
        self.owner, self.index = layout.slots(step)
        self.values = {}  # kind -> (values [SLOTS] float32, absent slots)
        self._by_param = None

    def put_tensors(self, kind, tensors):
        """[(i, tensor)] not laid flat (the optimizer's state after the step): each one's sampled elements read
        where it is; a tensor not of its parameter's size (or not listed) leaves its slots absent."""
        if self._by_param is None:
            starts = np.array(self.layout.starts, dtype=np.int64)
            self._by_param = {int(i): (np.flatnonzero(self.owner == i), self.index[self.owner == i] - starts[i])
                              for i in np.unique(self.owner)}
        vals = np.zeros(SLOTS, dtype=np.float32)
        have = np.zeros(len(self.layout.sizes), dtype=bool)
        for i, t in tensors:
            sel = self._by_param.get(i)
            if t.numel() != self.layout.sizes[i]:
                continue
            have[i] = True
            if sel is not None:
                vals[sel[0]] = t.detach().reshape(-1).numpy()[sel[1]]
        missing = ~have[self.owner]
        vals[missing] = 0.0
        self.values[kind] = (vals, np.flatnonzero(missing).tolist())

    def put(self, kind, buf):
        vals = buf.a[self.index]
        missing = ~buf.present[self.owner]
        if missing.any():
            vals[missing] = 0.0
        self.values[kind] = (vals, np.flatnonzero(missing).tolist())

    def kinds(self):
        out, absent = [], {}
        for kind in sorted(self.values):
            vals, missing = self.values[kind]
            out.append(("sample/" + kind, torch.from_numpy(vals)))
            if missing:
                absent[kind] = missing
        return out, absent
