"""Whole-run steps of a small CPU model, laid flat: each kind of tensor (local gradients, .grad, the parameters,
each optimizer state key) copied end to end into one buffer, so that its digests, weighted sums, NaN/inf flags
and sample take a few numpy calls for all parameters at once instead of a dozen per tensor. A course's model
(tens of thousands of parameters, a few tensors) steps in about 3 ms: per-tensor Python would cost more than
the step (bench/README.md, "The recorder on a course-sized run").

What comes out is what the per-tensor functions give (digests.py, sample.py): the same fold64 digests bit for
bit, the same sample; the weighted sums S and A in float64 in another order (within the bound ddp_check allows
for float64 rounding, src/check/replay/wsum_check.cc), Q in float64."""

import sys
import zlib

import numpy as np
import torch

from .digests import _FOLD_COLUMNS, WSUM_COLUMNS
from .sample import SAMPLE_MULTIPLIER, SLOTS

_ROW = 2 * _FOLD_COLUMNS  # floats: a row of 1021 64-bit words
FLAT_MAX_ELEMENTS = 4 << 20  # larger models: per-tensor (their step dwarfs the per-tensor calls)
# What a kind's pass takes (fast.py takes only these; here each is computed when asked for).
DIGEST, WSUM, ABSOLUTE, FLAGS = 1, 2, 4, 8


FAST_MAX_ELEMENTS, FAST_MAX_PARAMS = 1 << 28, 1024  # fast.py reads the tensors in place: no copy bounds its size


def _flat_layout_ok(params, max_elements=FLAT_MAX_ELEMENTS, max_params=None):
    """Whether these parameters can be laid flat: dense contiguous float32 on the CPU, none empty, not too many."""
    if sys.byteorder != "little":  # fold64's words are little-endian
        return False
    total = 0
    for p in params:
        if (p.device.type != "cpu" or p.dtype != torch.float32 or p.layout != torch.strided
                or not p.is_contiguous() or p.numel() == 0):
            return False
        total += p.numel()
    return total <= max_elements and (max_params is None or len(params) <= max_params)


class _FlatBuf:
    """One kind's buffer: `a` (numpy float32, the layout's length, padding +0.0), `views` (torch, one per
    parameter, its shape) and which parameters it holds this step."""

    def __init__(self, layout):
        self.a = np.zeros(layout.length, dtype=np.float32)
        t = torch.from_numpy(self.a)
        self.views = [t[s:s + n].view(shape) for s, n, shape in zip(layout.starts, layout.sizes, layout.shapes)]
        self.present = np.zeros(len(layout.sizes), dtype=bool)

        self.layout = layout

    def put(self, i, tensor, mode=0):
        self.views[i].copy_(tensor.detach())
        self.present[i] = True

    def put_all(self, tensors, mode=0):
        """[(i, tensor)]: those parameters' tensors (the others not present)."""
        self.present[:] = False
        for i, t in tensors:
            self.put(i, t)

    def more(self, mode):
        """(Each value is computed when asked for.)"""

    def digests(self):
        return self.layout.digests(self.a)

    def wsums(self, absolute=True):
        return self.layout.wsums(self.a, absolute)

    def finite(self):
        return self.layout.finite(self.a)

    def bits_zero(self):
        return self.layout.bits_zero(self.a)

    def same_as(self, other):
        """Every bit the same as `other`'s tensors."""
        return bool(np.array_equal(self.present, other.present)
                    and np.array_equal(self.a.view(np.uint32), other.a.view(np.uint32)))

    def sample_values(self, sample):
        return self.a[sample.index]


class _Flat:
    """The layout: parameter i at starts[i], sizes[i] elements, in rows of 2042 floats (1021 64-bit words) of its
    own, the rest of its last row +0.0. fold64 (word j into column j mod 1021; an odd last float is a word's low
    half, its high half zero) is then a column sum over the parameter's rows, and element k's weight in the
    weighted sums (w_(k mod 1021)) that of its column: each is a few vectorised passes over the buffer, where a
    gather or a reduceat per element costs twice as much (bench/README.md, "The recorder on a course-sized run")."""

    def __init__(self, params):
        self.sizes = [p.numel() for p in params]
        self.shapes = [tuple(p.shape) for p in params]
        rows = [(n + _ROW - 1) // _ROW for n in self.sizes]
        first = np.cumsum([0] + rows[:-1]).astype(np.int64)
        self._spans = [(int(r0), int(r0) + r) for r0, r in zip(first, rows)]
        self._first = first
        self._nrows = sum(rows)
        self.starts = [int(r0) * _ROW for r0 in first]
        self.length = self._nrows * _ROW
        self.bufs = {}
        self._rows = len(self.sizes)
        self._fold = np.zeros((self._rows, _FOLD_COLUMNS), dtype=np.uint64)
        self._x = None  # float64 scratch of the weighted sums (made at their first use: fast.py needs none)
        j = np.arange(WSUM_COLUMNS, dtype=np.int64)
        w = ((j * 2654435761) % (1 << 20)).astype(np.float64) / (1 << 20) + 1.0
        self._w2 = np.tile(w, _ROW // WSUM_COLUMNS)  # column c of a row: element k = r * 2042 + c, k mod 1021 = c mod 1021
        self._bounds = np.array(self.starts, dtype=np.int64)
        # The sample: slots over the parameters laid end to end without padding (sample.py).
        self._plain = np.cumsum([0] + self.sizes[:-1]).astype(np.int64)
        self._total = sum(self.sizes)
        self._pad_shift = np.array(self.starts, dtype=np.int64) - self._plain

    def buf(self, kind):
        """The buffer kept for `kind`, reused from step to step."""
        b = self.bufs.get(kind)
        if b is None:
            b = self.bufs[kind] = self.new_buf()
        return b

    def new_buf(self):
        return _FlatBuf(self)

    def set_slots(self, owner, index):
        """The step's sample slots (fast.py reads them at each pass; here the sample gathers from the copies)."""

    def digests(self, a):
        """fold64 digest of each parameter's elements in `a` (digests.py _digest), as ints."""
        words = a.view(np.uint64).reshape(self._nrows, _FOLD_COLUMNS)
        out = []
        for i, (r0, r1) in enumerate(self._spans):
            if r1 - r0 == 1:  # one row: its words are the sums
                out.append(zlib.crc32(words[r0]))
            else:
                np.add.reduce(words[r0:r1], axis=0, out=self._fold[i])  # wraps modulo 2^64
                out.append(zlib.crc32(self._fold[i]))
        return out

    def wsums(self, a, absolute=True):
        """[parameters, 3] float64: S = sum w_k x_k, A = sum w_k |x_k| (NaN where absolute=False), Q = sum x_k^2."""
        if self._x is None:
            self._x = np.empty((self._nrows, _ROW))
        x = self._x
        np.copyto(x, a.reshape(self._nrows, _ROW))  # float32 to float64: exact
        rows = np.empty((3, self._nrows))
        rows[0] = np.einsum("ij,j->i", x, self._w2)  # numpy's own loops: no BLAS thread is woken
        rows[2] = np.einsum("ij,ij->i", x, x)
        if absolute:
            rows[1] = np.einsum("ij,j->i", np.abs(x, out=x), self._w2)
        out = np.empty((self._rows, 3))
        with np.errstate(all="ignore"):  # an overflow or a NaN is a value to report, not a warning in the training
            out[:, 0] = np.add.reduceat(rows[0], self._first)
            out[:, 1] = np.add.reduceat(rows[1], self._first) if absolute else np.nan
            out[:, 2] = np.add.reduceat(rows[2], self._first)
        return out

    def finite(self, a):
        """Per parameter: whether all its elements are finite (NaN propagates through max; +-inf is the max of |x|)."""
        m = np.abs(a.reshape(self._nrows, _ROW)).max(axis=1)
        return np.isfinite(np.maximum.reduceat(m, self._first))

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
        layout.set_slots(self.owner, self.index)
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
        vals = buf.sample_values(self)
        if buf.present.all():
            self.values[kind] = (vals, [])
            return
        missing = ~buf.present[self.owner]
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
