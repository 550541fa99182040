"""What the recorder reduces a tensor to: fingerprints of samples, isfinite flags, and the 32-bit fold64
digest ddp_check recomputes from its prediction."""

import hashlib
import sys
import zlib

import torch

from .common import _HAVE_NUMPY, _local, _tensor_bytes


def _fingerprint(sample):
    """First 8 bytes of BLAKE2b (64-byte digest) over the sample's raw bytes, as 16 hex digits."""
    return hashlib.blake2b(bytes(_tensor_bytes(sample))).digest()[:8].hex()


def _fingerprints(x):
    """[_fingerprint(x[j]) for each sample j] of a CPU tensor (one of x itself where it is 0-dim): a contiguous
    batch numpy can view is hashed row by row from one buffer (the same bytes, without a tensor per sample)."""
    if x.dim() == 0:
        return [_fingerprint(x)]
    if _HAVE_NUMPY and x.is_contiguous() and x.shape[0] and sys.byteorder == "little":
        try:
            raw = memoryview(x.numpy()).cast("B")
        except Exception:  # a dtype numpy lacks (bfloat16)
            raw = None
        if raw is not None:
            row = len(raw) // x.shape[0]
            return [hashlib.blake2b(raw[j * row:(j + 1) * row]).digest()[:8].hex() for j in range(x.shape[0])]
    return [_fingerprint(x[j]) for j in range(x.shape[0])]


def _param_entry(name, p):
    """A parameter's manifest entry; "strides" where its memory is not row-major (channels_last): DDP's reducer
    lays its gradient into the bucket in the parameter's own strides, so the ring chunks it in memory order."""
    t = _local(p)
    entry = {"name": name, "shape": list(t.shape), "dtype": "float32"}
    if t.dim() > 1 and not t.is_contiguous() and t.layout == torch.strided:
        entry["strides"] = list(t.stride())
    return entry


def _finite_flag(t):
    """Whether floating tensor t (non-empty) holds only finite values, as a 0-dim bool on t's device (no sync).
    Its least and greatest values: a NaN anywhere makes both NaN (torch.aminmax propagates NaN), +inf is the
    greatest, -inf the least; unlike a sum, nothing finite overflows. One read of t and no tensor of t's size
    (isfinite(t).all() writes a bool per element first: about 18x slower on a CPU, bench/README.md)."""
    t = t.detach()
    if t.dtype not in (torch.float32, torch.float64):  # torch 1.13 has no aminmax for Half on a CPU
        return torch.isfinite(t).all()
    lo, hi = torch.aminmax(t)
    return torch.isfinite(lo) & torch.isfinite(hi)


def _nonfinite(named):
    """The names of [(name, tensor)] holding a NaN or an infinity: one pass each on the tensor's own device
    (_finite_flag), and one transfer of the flags."""
    named = [(n, _local(t).detach()) for n, t in named if t is not None]
    named = [(n, t) for n, t in named if t.is_floating_point() and t.numel()]
    if not named:
        return []
    flags = torch.stack([_finite_flag(t).to("cpu") for _, t in named]).tolist()
    return [n for (n, _), ok in zip(named, flags) if not ok]


def _input_nonfinite(x):
    """Whether a batch holds a NaN or an infinity: a float32 batch's float64 sum is finite exactly where its
    elements are (one numpy call); any other, _nonfinite's."""
    if _HAVE_NUMPY and x.dtype == torch.float32 and x.numel():
        try:
            import numpy as np
            with np.errstate(all="ignore"):
                return not np.isfinite(np.add.reduce(x.reshape(-1).numpy(), dtype=np.float64))
        except Exception:
            pass
    return bool(_nonfinite([("x", x)]))


def _first_tensor(obj, depth=0):
    if isinstance(obj, torch.Tensor):
        return obj
    if depth > 4:
        return None
    if isinstance(obj, (list, tuple)):
        for x in obj:
            t = _first_tensor(x, depth + 1)
            if t is not None:
                return t
    if isinstance(obj, dict):
        for x in obj.values():
            t = _first_tensor(x, depth + 1)
            if t is not None:
                return t
    return None


def _sqrt_is_ieee(device):
    """Whether this torch's float32 sqrt on `device` is IEEE's correctly rounded one (double sqrt rounded once
    to float is). Debian's 1.13 is; pip's CPU builds compute it with MKL's VML, 1 ulp off on about one value in
    five. ddp_check then compares Adam's step allclose. Uses its own tensors: draws nothing from the run's RNG."""
    x = torch.arange(1, 4097, dtype=torch.float64).mul_(0.7853981633974483).float().to(device)
    return bool(torch.equal(x.sqrt(), x.double().sqrt().float()))


_FOLD_COLUMNS = 1021


def _fold_numpy(a, n, words):
    import numpy as np
    w = a[:2 * words].view(np.uint64)
    full = words // _FOLD_COLUMNS * _FOLD_COLUMNS
    sums = np.add.reduce(w[:full].reshape(-1, _FOLD_COLUMNS), axis=0)  # wraps modulo 2^64
    sums[:words - full] += w[full:]
    if n % 2:
        sums[words % _FOLD_COLUMNS] += np.uint64(a[n - 1:].view(np.uint32)[0])
    return zlib.crc32(sums.astype("<u8").tobytes())


def _digest(t):
    """The digest ddp_check recomputes from its prediction ("digest": "fold64", src/check/trace.cc fold64_of):
    the float32 tensor's bytes, row-major little-endian, as 64-bit words (a last odd float is a word's low half)
    summed modulo 2^64 into 1021 columns (word j into column j mod 1021), then zlib's CRC-32 of the 1021 sums.
    Integer sums are exact in any order, so torch's own sum folds on the tensor's device (a GPU sends 8 KiB, not
    the tensor) at about half a CRC's cost over all the bytes (bench/README.md)."""
    t = _local(t).detach().reshape(-1)
    n = t.numel()
    words = n // 2
    if _HAVE_NUMPY and t.device.type == "cpu" and words >= _FOLD_COLUMNS:
        try:  # numpy's uint64 reduce is the same sums, about 1.6x faster than torch's int64 one on a CPU
            return _fold_numpy(t.numpy(), n, words)
        except Exception:
            pass
    sums = torch.zeros(_FOLD_COLUMNS, dtype=torch.int64, device=t.device)
    if words:
        head = t[:2 * words]
        try:
            w = head.view(torch.int64)
        except RuntimeError:  # a view at an odd offset (a bucket view): its words are not 8-byte aligned
            w = head.clone().view(torch.int64)
        full = words // _FOLD_COLUMNS * _FOLD_COLUMNS
        if full:
            sums += w[:full].view(-1, _FOLD_COLUMNS).sum(0)
        if full < words:
            sums[:words - full] += w[full:]
    if n % 2:
        sums[words % _FOLD_COLUMNS] += t[n - 1:].view(torch.int32).to(torch.int64)[0] & 0xFFFFFFFF
    return zlib.crc32(_tensor_bytes(sums.cpu()))


# Weighted sums (docs/trace_format.md, "The weighted sums"): element i of a tensor, row-major, weighs
#   w_(i mod WSUM_COLUMNS) = 1 + ((j * 2654435761) mod 2^20) / 2^20,  j = i mod WSUM_COLUMNS,
# a number in [1, 2) exact in float64; distinct weights see two swapped elements where a plain sum would not.
WSUM_COLUMNS = 1021
_WSUM_ROWS = 256  # rows of WSUM_COLUMNS floats a chunk: 2 MiB of float64, in cache while it is summed
_WEIGHTS = {}


def _wsum_weights(device):
    w = _WEIGHTS.get(str(device))
    if w is None:
        j = torch.arange(WSUM_COLUMNS, dtype=torch.int64)
        w = ((j * 2654435761) % (1 << 20)).to(torch.float64).div_(1 << 20).add_(1.0)
        w = _WEIGHTS[str(device)] = w.to(device)
    return w


def _wsums_numpy(a, absolute):
    """Column sums (float64) of x and |x|, and sum x^2 (float32 BLAS: the report's norm, not the check's)."""
    import numpy as np
    with np.errstate(all="ignore"):  # an overflow or a NaN is a value to report, not a warning in the training
        return _wsums_chunks(np, a, absolute)


def _wsums_chunks(np, a, absolute):
    cols, q = np.zeros((2, WSUM_COLUMNS)), 0.0
    full = a.shape[0] // WSUM_COLUMNS * WSUM_COLUMNS
    step = _WSUM_ROWS * WSUM_COLUMNS
    buf = np.empty(min(step, full))
    for s in range(0, full, step):  # a chunk at a time, each pass over it while it is in cache
        c = a[s:min(s + step, full)]
        b = buf[:c.shape[0]]
        b[...] = c
        rows = b.reshape(-1, WSUM_COLUMNS)
        cols[0] += np.add.reduce(rows, axis=0)
        q += float(np.dot(c, c))
        if absolute:
            np.abs(b, out=b)
            cols[1] += np.add.reduce(rows, axis=0)
    rest = a[full:]
    q += float(np.dot(rest, rest))
    rest = rest.astype(np.float64)
    cols[0, :rest.shape[0]] += rest
    cols[1, :rest.shape[0]] += np.abs(rest)
    return cols, q


def _wsums(t, absolute=True):
    """[S, A, Q] (float64, on t's device, no sync) of float32 tensor t: S = sum_i w_i x_i and A = sum_i w_i |x_i|
    in float64 (A is NaN where absolute=False), and Q = sum_i x_i^2 (for the report's norms only: accumulated in
    float32 on a CPU). In float64 a float32 tensor's sums cannot overflow, so S is finite exactly where every
    element is: S is also the tensor's NaN/inf flag. One read of t: column sums chunk by chunk (numpy, on a CPU),
    or t's float64 copy summed by columns (torch, on its device)."""
    t = _local(t).detach().reshape(-1)
    w = _wsum_weights(t.device)
    if _HAVE_NUMPY and t.device.type == "cpu":
        try:
            cols, q = _wsums_numpy(t.numpy(), absolute)
            out = torch.cat([torch.from_numpy(cols) @ w, torch.tensor([q], dtype=torch.float64)])
            if not absolute:
                out[1] = float("nan")
            return out
        except Exception:
            pass
    x = t.double()
    full = x.numel() // WSUM_COLUMNS * WSUM_COLUMNS
    cols = torch.zeros(2, WSUM_COLUMNS, dtype=torch.float64, device=t.device)
    rest = x[full:]
    cols[0] += x[:full].view(-1, WSUM_COLUMNS).sum(0)
    cols[0, :rest.numel()] += rest
    q = torch.dot(x, x).reshape(1)
    if absolute:
        x.abs_()
        cols[1] += x[:full].view(-1, WSUM_COLUMNS).sum(0)
        cols[1, :rest.numel()] += rest  # a view of x: already |x|
    out = torch.cat([cols @ w, q])
    if not absolute:
        out[1] = float("nan")
    return out


# ---------------------------------------------------------------------------------------------------------
# The all-reduce's addition order, measured on the run's own communicator (docs/trace_format.md,
# "allreduce_order"). For each bucket size n and each pair of ranks (a, b), one SUM all-reduce where rank a
# holds +2^30, rank b -2^30 and every other rank 1: in a chain ((x_p0 + x_p1) + x_p2) + ..., the ones added
# before both big values are absorbed (2^30 + m rounds to 2^30 for m < 32) and the pair cancels exactly, so
# the result counts the ones added after the later of a and b: N - 1 - max(pos a, pos b). Element by element,
# the N(N-1)/2 probes give every rank's position (rank c's is the least of its pairs' maxima; the first two
# share position 1, and x_a + x_b = x_b + x_a), and a result no chain can give says the element is no chain
# (a tree, two partial sums added). A seeded all-reduce (rank r: torch.randn(n) from manual_seed(seed + r)),
# digested, lets ddp_check confirm the whole order, not just the positions. Cost: N(N-1)/2 + 1 all-reduces
# of each distinct bucket size, at close().
