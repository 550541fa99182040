"""Whole-run steps of a small CPU model read where the tensors are: _fast.c's one pass per kind of tensor (digests,
weighted sums, flags, sample) in place of flat.py's copy into a buffer and a few numpy calls per value. A course's
model steps in a few milliseconds; per-tensor numpy costs more than the step (bench/README.md, "Where a small
step's recording goes").

_fast.c is compiled once per machine by the system's C compiler (`cc`, or $CC) into a cache folder
($DDPLAB_TRACE_CACHE, else ~/.cache/ddplab_trace, else the temporary folder), named by the source's hash, written
under a temporary name and renamed (ranks compiling at once each finish whole). Without a compiler, or with
DDPLAB_TRACE_FAST=0, flat.py's numpy path gives the same values (the digests bit for bit, the weighted sums within
ddp_check's float64 bound)."""

import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

from .digests import _FOLD_COLUMNS as _COLUMNS
from .flat import DIGEST, _Flat
from .sample import SAMPLE_MULTIPLIER, SLOTS

_F32 = torch.float32
_LIB = []  # [the loaded library, or None]: tried once per process


def _cache_dirs():
    env = os.environ.get("DDPLAB_TRACE_CACHE")
    if env:
        yield env
    home = os.path.expanduser("~")
    if home and home != "~":
        yield os.path.join(home, ".cache", "ddplab_trace")
    yield os.path.join(tempfile.gettempdir(), "ddplab_trace-%d" % os.getuid())


def _compile(src, code):
    """The library's path, compiled now where it is not there yet; None where no compiler or folder serves."""
    tag = hashlib.sha256(code).hexdigest()[:16]
    cc = os.environ.get("CC") or "cc"
    for d in _cache_dirs():
        so = os.path.join(d, "ddplab_fast_%s.so" % tag)
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            st = os.stat(d)
            if st.st_uid != os.getuid() or st.st_mode & 0o022:  # a folder another user could write: not loaded from
                continue
            if os.path.exists(so):
                return so
            fd, tmp = tempfile.mkstemp(prefix=".ddplab_fast_", suffix=".so", dir=d)
            os.close(fd)
        except OSError:
            continue
        try:
            r = subprocess.run([cc, "-O3", "-std=gnu99", "-ffp-contract=off", "-shared", "-fPIC", "-o", tmp, src],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
            if r.returncode != 0:
                return None  # the compiler refused: another folder would not change that
            os.replace(tmp, so)
            return so
        except (OSError, subprocess.SubprocessError):
            return None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return None


def _library():
    """_fast.c's functions (ctypes), or None: compiled and loaded once per process."""
    if _LIB:
        return _LIB[0]
    lib = None
    try:
        if os.environ.get("DDPLAB_TRACE_FAST", "1") != "0":
            src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_fast.c")
            with open(src, "rb") as f:
                so = _compile(src, f.read())
            if so is not None:
                lib = ctypes.CDLL(so)
                lib.ddplab_fast_clmul.restype = ctypes.c_int
                lib.ddplab_fast_clmul.argtypes = [ctypes.c_int]
                lib.ddplab_fast_init.restype = None
                lib.ddplab_fast_init()
                lib.ddplab_fast_zeros.restype = ctypes.c_uint32
                lib.ddplab_fast_zeros.argtypes = [ctypes.c_int64]
                p = ctypes.c_void_p
                lib.ddplab_fast_pass.restype = None
                lib.ddplab_fast_pass.argtypes = [ctypes.c_int, p, p, ctypes.c_int, p, p, p, ctypes.c_int, p, p, p]
                lib.ddplab_fast_crc.restype = None
                lib.ddplab_fast_crc.argtypes = [ctypes.c_int, p, p, p, p, p]
                lib.ddplab_fast_same.restype = ctypes.c_int
                lib.ddplab_fast_same.argtypes = [ctypes.c_int, p, p, p, p]
                lib.ddplab_fast_batch.restype = ctypes.c_int
                lib.ddplab_fast_batch.argtypes = [p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, p]
                lib.ddplab_fast_slots.restype = None
                lib.ddplab_fast_slots.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int, p, ctypes.c_int,
                                                  ctypes.c_uint64, p, p]
    except Exception:
        lib = None
    _LIB.append(lib)
    return lib


class _FastBuf:
    """One kind's values, taken in one pass where its tensors are: digests, weighted sums, flags (per parameter,
    in the modes asked) and the step's sample, for the parameters `present`."""

    def __init__(self, layout):
        n = len(layout.sizes)
        self.layout = layout
        self.present = np.zeros(n, dtype=bool)
        self._ptrs = np.zeros(n, dtype=np.uint64)
        self._sums = np.zeros((n, _COLUMNS), dtype=np.uint64)  # each parameter's fold64 sums
        self._d = np.zeros(n, dtype=np.uint32)
        self._have_d = False  # whether _d holds the CRCs of _sums (taken when asked for)
        self._ws = np.full((n, 3), np.nan)
        self._flags = np.zeros(n, dtype=np.uint8)
        self.vals = np.zeros(SLOTS, dtype=np.float32)
        self._out = (self._sums.ctypes.data, self._ws.ctypes.data, self._flags.ctypes.data)
        self._ptrs_c, self._vals_c, self._present_c = self._ptrs.ctypes.data, self.vals.ctypes.data, self.present.ctypes.data
        self._held = []  # copies the pointers point into (a tensor not contiguous float32 on the CPU)

    def _pass(self, mode):
        lay = self.layout
        owner, off, nslots = lay.cur_slots
        lay.lib.ddplab_fast_pass(lay.n, self._ptrs_c, lay.sizes_c, mode, *self._out, nslots, owner, off, self._vals_c)
        if mode & DIGEST:
            self._have_d = False

    def more(self, mode):
        """What `mode` adds, from the tensors of the last put_all (still as they were: the same callback)."""
        self._pass(mode)

    def _ptr(self, i, t, held):
        """Where _fast.c reads t: contiguous float32 of parameter i's size on the CPU (a copy, kept in `held`
        until the pass, only where it is not)."""
        if not (t.is_cpu and t.dtype is _F32 and t.is_contiguous()):
            t = t.detach().to(device="cpu", dtype=_F32).contiguous()
            held.append(t)
        if t.numel() != self.layout.sizes[i]:
            raise ValueError("a tensor of %d elements for a parameter of %d" % (t.numel(), self.layout.sizes[i]))
        return t.data_ptr()

    def put(self, i, tensor, mode):
        """Parameter i's tensor alone (a local gradient, as its hook sees it): its values now."""
        self._held = []
        ptrs = self._ptrs
        ptrs[:] = 0
        ptrs[i] = self._ptr(i, tensor, self._held)
        self._pass(mode)
        self.present[i] = True

    def put_all(self, tensors, mode):
        """[(i, tensor)]: those parameters' tensors (the others not present). Copies made for _fast.c are kept
        until the next put, for more()."""
        ptrs, present, self._held = self._ptrs, self.present, []
        ptrs[:] = 0
        present[:] = False
        for i, t in tensors:
            ptrs[i] = self._ptr(i, t, self._held)
            present[i] = True
        self._pass(mode)

    def digests(self):
        if not self._have_d:
            lay = self.layout
            lay.lib.ddplab_fast_crc(lay.n, self._present_c, lay.sizes_c, lay.zeros_c, self._out[0], self._d.ctypes.data)
            self._have_d = True
        return self._d.tolist()

    def wsums(self, absolute=True):
        return self._ws.copy()

    def finite(self):
        return (self._flags & 1) != 0

    def bits_zero(self):
        return (self._flags & 2) != 0

    def same_as(self, other):
        """Every bit the same as `other`'s tensors, as their fold64 sums tell (both taken with DIGEST)."""
        return bool(self.layout.lib.ddplab_fast_same(self.layout.n, self._present_c, other._present_c,
                                                     self._out[0], other._out[0]))

    def sample_values(self, sample):
        return self.vals.copy()


class _FastFlat(_Flat):
    """flat.py's layout (its slots and names), its kinds taken by _fast.c where they are."""

    def __init__(self, params, lib):
        super().__init__(params)
        self.lib = lib
        self.n = len(self.sizes)
        self._sizes = np.array(self.sizes, dtype=np.int64)
        self._zeros = np.array([lib.ddplab_fast_zeros(8 * max(0, 1021 - (n + 1) // 2)) for n in self.sizes],
                               dtype=np.uint32)
        self.sizes_c, self.zeros_c = self._sizes.ctypes.data, self._zeros.ctypes.data
        self._slot_owner = np.zeros(SLOTS, dtype=np.int32)
        self._slot_off = np.zeros(SLOTS, dtype=np.int64)
        self._slot_owner_c, self._slot_off_c = self._slot_owner.ctypes.data, self._slot_off.ctypes.data
        self.cur_slots = (self._slot_owner_c, self._slot_off_c, SLOTS)
        self._plain_c = self._plain.ctypes.data  # (flat.py's: each parameter's first element, laid end to end)
        self._starts = np.asarray(self.starts, dtype=np.int64)

    def new_buf(self):
        return _FastBuf(self)

    def slots(self, step):
        """flat.py's slots of `step` (owner, padded index), taken by _fast.c, which keeps them for its passes."""
        self.lib.ddplab_fast_slots(step, self._total, self.n, self._plain_c, SLOTS, SAMPLE_MULTIPLIER,
                                   self._slot_owner_c, self._slot_off_c)
        owner = self._slot_owner.astype(np.int64)
        return owner, self._slot_off + self._starts[owner]

    def set_slots(self, owner, index):
        """(slots() has set them)"""


def _batch(x):
    """(each sample's fingerprint as digests.py _fingerprints gives it, whether x is finite or None where _fast.c
    does not tell: not float32) of a contiguous CPU batch x, or None where _fast.c is not to be had."""
    lib = _library()
    if lib is None or x.dim() == 0 or not (x.is_cpu and x.is_contiguous()) or sys.byteorder != "little":
        return None
    rows = x.shape[0]
    if rows == 0:
        return None
    out = ctypes.create_string_buffer(8 * rows)
    f32 = x.dtype is _F32
    finite = lib.ddplab_fast_batch(x.data_ptr(), rows, x.numel() // rows * x.element_size(), int(f32), out)
    raw = out.raw
    return [raw[8 * r:8 * r + 8].hex() for r in range(rows)], (bool(finite) if f32 else None)


def _fast_layout(params):
    """_FastFlat for these parameters (flat.py _flat_layout_ok holds), or None where _fast.c is not to be had."""
    lib = _library()
    return None if lib is None else _FastFlat(params, lib)
