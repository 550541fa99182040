"""The recorder's digest (verify/ddplab_trace _digest, "digest": "fold64") against its definition in
docs/trace_format.md, written here the slow way with numpy: random tensors of every length class (empty, one
float, an odd tail, a partial last row of 1021 words, many rows), a view at an odd offset (a bucket view), a
transposed matrix. Then the digests of the fixed vectors tests/check_trace_test.cc gives ddp_check's fold64_of
(src/check/trace.cc): values whose float32 bits are i * 2654435761 mod 2^32, i = 0 .. n-1. Then what the
whole-run mode relies on, on this torch: the NaN/inf flag and the all-zero test, torch's version counter (bumped
by an edit through .detach(), not through .data), the sample's slots covering a model once, and the weighted
sums against their definition.

    python tests/ddp_check/digest.py      (prints the fixed vectors' digests; exit status 1 on a mismatch)
"""
import json
import os
import sys
import zlib

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "verify"))
from recorder_internals import T  # noqa: E402


def by_definition(t):
    b = t.detach().contiguous().reshape(-1).numpy().tobytes()
    if len(b) % 8:
        b += b"\0" * 4  # a last odd float is the low half of a word
    w = np.frombuffer(b, dtype=np.uint64)
    sums = np.zeros(1021, dtype=np.uint64)
    for c in range(min(1021, w.size)):
        sums[c] = w[c::1021].sum(dtype=np.uint64)  # numpy's uint64 sum wraps modulo 2^64
    return zlib.crc32(sums.astype("<u8").tobytes())


def wsums_close(got, want):
    """[S, A, Q] against the per-tensor _wsums: S and A to float64's rounding (2^-40 of A), Q to float32's; both
    NaN where a NaN is in the tensor (an infinite sum's difference is NaN: the flags are checked apart)."""
    if np.isnan(want[0]) and np.isnan(got[0]):
        return True
    with np.errstate(invalid="ignore"):
        return not (abs(got[0] - want[0]) > 1e-12 * want[1] or abs(got[1] - want[1]) > 1e-12 * want[1]
                    or abs(got[2] - want[2]) > 1e-4 * want[2])


def fixed(n):
    bits = (np.arange(n, dtype=np.uint64) * np.uint64(2654435761)) % np.uint64(1 << 32)
    return torch.from_numpy(bits.astype(np.uint32).view(np.float32).copy())


def flags_and_sample():
    """What the whole-run mode relies on (docs/trace_format.md, "The whole run"), on this torch."""
    bad = []
    g = torch.Generator().manual_seed(1)
    # The NaN/inf flag (torch.aminmax): exact where a sum would not be.
    t = torch.randn(5000, generator=g)
    for v, want in [(float("nan"), False), (float("inf"), False), (-float("inf"), False), (3e38, True)]:
        u = t.clone()
        u[1234] = v
        u[4321] = v if v == v else 1.0  # 3e38 twice: a float32 sum overflows, the values are finite
        if bool(T._finite_flag(u)) != want:
            bad.append("_finite_flag with %r" % v)
    for dt in (torch.float16, torch.bfloat16, torch.float64):  # other dtypes the recorder meets (optimizer state)
        u = t.to(dt)
        u[7] = float("nan")
        if bool(T._finite_flag(u)) or not bool(T._finite_flag(t.to(dt))):
            bad.append("_finite_flag on %s" % dt)
    # Every bit zero: +0.0 only (-0.0 and the least subnormal are not).
    z = torch.zeros(3000)
    if not T._all_bits_zero(z):
        bad.append("_all_bits_zero(+0.0)")
    for v in (-0.0, 1e-45):
        u = z.clone()
        u[2999] = v
        if T._all_bits_zero(u):
            bad.append("_all_bits_zero with %r" % v)
    # torch's version counter: an in-place edit through .detach() bumps it, one through .data does not, so the
    # recorder digests .grad and the parameters to see a change (and reads the counter only for optimizer state).
    x = torch.zeros(4)
    v0 = x._version
    x.data.add_(1)
    if x._version != v0:
        bad.append(".data.add_() bumped the version counter")
    x.detach().add_(1)
    if x._version == v0:
        bad.append(".detach().add_() left the version counter")
    # The sample's slots: consecutive steps visit every element once in total / 64 steps.
    sizes = [7, 1, 64, 3, 53]  # 128 elements: 2 steps
    seen = []
    for step in (6, 7):
        for i, (slots, elems) in T._plan(step, sizes).items():
            seen += [(i, e) for e in elems]
    if sorted(seen) != sorted((i, e) for i, n in enumerate(sizes) for e in range(n)):
        bad.append("the sample's slots of two consecutive steps do not cover a 128-element model once")
    print("whole-run flags and sample checked" if not bad else "whole-run flags and sample: %d bad" % len(bad))
    return bad


def weighted_sums():
    """The weighted sums (docs/trace_format.md, "The weighted sums") against their definition: element i weighs
    1 + ((j * 2654435761) mod 2^20) / 2^20, j = i mod 1021; S = sum w_i x_i, A = sum w_i |x_i|, in float64 (and
    Q = sum x_i^2, the report's norm, to 1e-4). The
    numpy path (CPU) and torch's (a GPU's) agree with it to float64's rounding, for every length class; S is
    finite exactly where every element is (two 3e38s: finite)."""
    bad = []
    g = torch.Generator().manual_seed(2)
    j = np.arange(1021, dtype=np.uint64)
    w = 1.0 + ((j * np.uint64(2654435761)) % np.uint64(1 << 20)).astype(np.float64) / (1 << 20)
    cases = [torch.randn(n, generator=g) for n in (0, 1, 1020, 1021, 1022, 1021 * 256 + 5, 1021 * 700 + 3)]
    m = torch.randn(37, 41, generator=g)
    cases += [m.t(), torch.randn(5001, generator=g)[1:]]  # transposed, a view at an odd offset
    for t in cases:
        x = t.contiguous().reshape(-1).numpy().astype(np.float64)
        ww = np.resize(w, x.size) if x.size else w[:0]
        want = (float(np.dot(ww, x)), float(np.dot(ww, np.abs(x))), float(np.dot(x, x)))
        for numpy_path in (True, False):
            T._HAVE_NUMPY = numpy_path
            try:
                got = T._wsums(t).tolist()
            finally:
                T._HAVE_NUMPY = True
            tol = 1e-12 * max(want[1], 1e-300)
            if abs(got[0] - want[0]) > tol or abs(got[1] - want[1]) > tol or abs(got[2] - want[2]) > 1e-4 * want[2]:
                bad.append("_wsums n=%d (%s): %r against %r" % (t.numel(), "numpy" if numpy_path else "torch",
                                                                got, want))
    t = torch.randn(5000, generator=g)
    for v, finite in [(float("nan"), False), (float("inf"), False), (-float("inf"), False), (3e38, True)]:
        u = t.clone()
        u[1234] = v
        u[4321] = v if v == v else 1.0
        for absolute in (True, False):
            if bool(torch.isfinite(T._wsums(u, absolute)[0])) != finite:
                bad.append("_wsums' S as a flag with %r" % v)
    print("weighted sums as defined" if not bad else "weighted sums: %d bad" % len(bad))
    return bad


def flat_layout():
    """The whole-run steps of a small CPU model laid flat (flat.py): the same digests (by definition), the
    weighted sums to float64's rounding, the flags, and the same sample as the per-tensor functions, for
    parameters of every length class (one float, odd, under and over 1021 words) with some absent; and the
    batch's fingerprints from one buffer as per sample."""
    bad = []
    g = torch.Generator().manual_seed(3)
    shapes = [(128, 32), (1,), (3, 5, 7), (2047,), (4099,), (10, 128), (10,)]
    params = [torch.randn(*s, generator=g) for s in shapes]
    params[1].fill_(float("nan"))
    params[6].zero_()
    layout = T._Flat(params)
    buf = layout.buf("x")
    buf.put_all(enumerate(params))
    if layout.digests(buf.a) != [by_definition(p) for p in params]:
        bad.append("flat digests")
    ws = layout.wsums(buf.a)
    for i, p in enumerate(params):
        if not wsums_close(ws[i], T._wsums(p).numpy()):
            bad.append("flat weighted sums of parameter %d: %r against %r" % (i, ws[i].tolist(), T._wsums(p).tolist()))
    if layout.finite(buf.a).tolist() != [i != 1 for i in range(len(params))]:
        bad.append("flat NaN flags")
    if layout.bits_zero(buf.a).tolist() != [i == 6 for i in range(len(params))]:
        bad.append("flat all-zero test")
    for step in (0, 1, 17, 98765):
        here = [(i, p) for i, p in enumerate(params) if i != 2]  # parameter 2 without this tensor
        ref = T._Sample(step, params)
        ref.take_all("x", here)
        ref.take_all("y", here)
        flat = T._FlatSample(layout, step)
        buf.put_all(here)
        flat.put("x", buf)
        flat.put_tensors("y", here)
        (rk, ra), (fk, fa) = ref.kinds(), flat.kinds()
        same = ra == fa and [k for k, _ in rk] == [k for k, _ in fk] and all(
            torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) for (_, a), (_, b) in zip(rk, fk))
        if not same:
            bad.append("flat sample at step %d" % step)
    for x in (torch.randn(5, 3, 2, generator=g), torch.arange(12).view(4, 3), torch.randn(4, 3, generator=g).t(),
              torch.tensor(2.0), torch.randn(3, 2, generator=g).bfloat16()):
        want = [T._fingerprint(x)] if x.dim() == 0 else [T._fingerprint(x[j]) for j in range(x.shape[0])]
        if T._fingerprints(x) != want:
            bad.append("fingerprints of a %s %s batch" % (x.dtype, list(x.shape)))
    print("flat layout as per tensor" if not bad else "flat layout: %d bad" % len(bad))
    return bad


def fast_passes():
    """_fast.c's passes (fast.py, compiled here by the system's C compiler) against the per-tensor functions and
    the definition: digests bit for bit, weighted sums to float64's rounding, flags, the sample at steps whose
    slot arithmetic passes 2^64, a parameter absent, a tensor at an odd offset (a bucket view) or not contiguous,
    one tensor at a time (a hook's); then each batch's fingerprints and NaN/inf flag."""
    lib = T._library()
    if lib is None:
        print("fast passes: _fast.c was not compiled (no C compiler, or DDPLAB_TRACE_FAST=0)")
        return ["_fast.c not compiled"]
    bad = []
    g = torch.Generator().manual_seed(4)
    shapes = [(128, 32), (1,), (3, 5, 7), (2041,), (2042,), (2043,), (4099,), (10, 128), (10,), (1021 * 2 * 3 + 1,)]
    params = [torch.randn(*s, generator=g) * 1e3 for s in shapes]
    params[1].fill_(float("nan"))
    params[5][7] = float("-inf")
    params[8].zero_()
    layout = T._fast_layout(params)
    every = T.DIGEST | T.WSUM | T.ABSOLUTE | T.FLAGS
    base = torch.randn(4100, generator=g)
    odd = base[1:4100]  # 4099 floats at an odd offset, as parameter 6
    clmul = lib.ddplab_fast_clmul(1)  # whether this processor's CRC is by carry-less multiplication: also without
    for step in (0, 1, 17, 98765, 10 ** 15 + 3):
        lib.ddplab_fast_clmul(step % 2)
        here = [(i, p) for i, p in enumerate(params) if i != 2]  # parameter 2 without this tensor
        if step == 17:
            here[5] = (6, odd)
        if step == 98765:
            here[0] = (0, params[0].t().contiguous().t())  # not contiguous: read through a copy
        ref = T._Sample(step, params)
        ref.take_all("x", here)
        sample = T._FlatSample(layout, step)
        buf = layout.buf("x")
        buf.put_all(here, every)
        sample.put("x", buf)
        d, ws = buf.digests(), buf.wsums()
        for i, p in here:  # (an infinite sum's difference is NaN: its flag is checked below)
            if d[i] != by_definition(p):
                bad.append("fast digest of parameter %d at step %d" % (i, step))
            want = T._wsums(p).numpy()
            if not wsums_close(ws[i], want):
                bad.append("fast weighted sums of parameter %d: %r against %r" % (i, ws[i].tolist(), want.tolist()))
        if buf.present.tolist() != [i != 2 for i in range(len(params))]:
            bad.append("fast: which parameters are present")
        if [bool(f) for i, f in enumerate(buf.finite()) if i != 2] != [i not in (1, 5) for i in range(len(params)) if i != 2]:
            bad.append("fast NaN/inf flags")
        if [bool(z) for i, z in enumerate(buf.bits_zero()) if i != 2] != [i == 8 for i in range(len(params)) if i != 2]:
            bad.append("fast all-zero test")
        (rk, ra), (fk, fa) = ref.kinds(), sample.kinds()
        if not (ra == fa and len(rk) == len(fk) == 1 and torch.equal(rk[0][1].nan_to_num(7.0), fk[0][1].nan_to_num(7.0))):
            bad.append("fast sample at step %d" % step)
        later = layout.buf("later")  # a pass, then what more() adds: the same (a copy's pointer still alive)
        later.put_all(here, T.DIGEST)
        torch.empty(1 << 16).fill_(1.0)  # (memory a freed copy would have been reused for)
        later.more(T.WSUM | T.ABSOLUTE | T.FLAGS)
        if (later.digests() != d or not np.array_equal(later.wsums(), ws, equal_nan=True)
                or not np.array_equal(later.finite(), buf.finite())):
            bad.append("fast: more() after a pass differs from one pass at step %d" % step)
        one = layout.buf("one")
        one.present[:] = False
        for i, p in here:  # a hook's: one tensor a pass, the sample filled as they come
            one.put(i, p, T.WSUM | T.ABSOLUTE)
        sample.put("one", one)
        if not np.array_equal(one.wsums(), ws, equal_nan=True) or not torch.equal(sample.kinds()[0][1][1].nan_to_num(7.0),
                                                                 fk[0][1].nan_to_num(7.0)):
            bad.append("fast: one tensor a pass differs from all at once at step %d" % step)
    lib.ddplab_fast_clmul(1)
    print("fast passes: CRC-32 by %s and by tables" % ("PCLMULQDQ" if clmul else "tables (no PCLMULQDQ here)"))
    for x in (torch.randn(5, 3, 2, generator=g), torch.arange(12).view(4, 3), torch.randn(7, 33, generator=g),
              torch.randn(3, 2, generator=g).bfloat16(), torch.randn(2, 1000, generator=g), torch.zeros(1, 0),
              torch.tensor([[1.0, float("inf")], [0.0, 2.0]]), torch.tensor([[float("nan")]])):
        got = T._batch(x)
        want = [T._fingerprint(x[j]) for j in range(x.shape[0])]
        if got is None or got[0] != want or got[1] != (bool(torch.isfinite(x).all()) if x.dtype == torch.float32
                                                        else None):
            bad.append("fast fingerprints or flag of a %s %s batch" % (x.dtype, list(x.shape)))
    print("fast passes as per tensor" if not bad else "fast passes: %d bad" % len(bad))
    return bad


def header_cache():
    """A step file's header: the part kept from step to step (writer.py _HEADERS) gives the bytes json.dumps
    of the whole header gives, whatever the metadata holds."""
    def whole(tensors, meta):
        header, offset = {}, 0
        for name, t in tensors:
            n = t.numel() * t.element_size()
            header[name] = {"dtype": "F64" if t.dtype == torch.float64 else "F32", "shape": list(t.shape),
                            "data_offsets": [offset, offset + n]}
            offset += n
        header["__metadata__"] = {"ddplab": meta}
        text = json.dumps(header, separators=(",", ":")).encode("utf-8")
        text += b" " * ((8 - len(text) % 8) % 8)
        return len(text).to_bytes(8, "little") + text

    bad = []
    kinds = [[("sample/grad", torch.zeros(64)), ("wsum/grad", torch.zeros(6, 3, dtype=torch.float64))],
             [("grad/w\u00e9", torch.zeros(2, 3)), ("sample/grad", torch.zeros(64))]]
    for tensors in kinds:
        for meta in ['{"step":1}', 'a "quote", a \\ and \u00e9\n', '', '{"step":2}']:
            if T._safetensors_parts(tensors, meta)[0] != whole(tensors, meta):
                bad.append("header of %s with metadata %r" % ([n for n, _ in tensors], meta))
    print("headers as json.dumps" if not bad else "headers: %d bad" % len(bad))
    return bad


def main():
    g = torch.Generator().manual_seed(0)
    bad = []
    for n in [0, 1, 2, 3, 1021, 2042, 2043, 4000, 100001, 3 * 2042 + 7]:
        t = torch.randn(n, generator=g) * 1e30
        if T._digest(t) != by_definition(t):
            bad.append("random n=%d" % n)
    big = torch.randn(10001, generator=g)
    if T._digest(big[1:]) != by_definition(big[1:].clone()):
        bad.append("a view at an odd offset")
    m = torch.randn(37, 41, generator=g)
    if T._digest(m.t()) != by_definition(m.t().contiguous()):
        bad.append("a transposed matrix")
    # The recorder folds CPU tensors of 1021 words or more with numpy where it can, others with torch's sum
    # (GPUs): the same digests.
    t = torch.randn(3 * 2042 + 7, generator=g)
    with_numpy = T._digest(t)
    T._HAVE_NUMPY = False
    try:
        if T._digest(t) != with_numpy or T._digest(t[1:]) != by_definition(t[1:].clone()):
            bad.append("torch's fold differs from numpy's")
    finally:
        T._HAVE_NUMPY = True
    for n in [1, 2, 2043, 5000]:
        t = fixed(n)
        d = T._digest(t)
        if d != by_definition(t):
            bad.append("fixed n=%d" % n)
        print("fixed n=%d fold64 %d" % (n, d))
    bad += flags_and_sample()
    bad += weighted_sums()
    bad += flat_layout()
    bad += fast_passes()
    bad += header_cache()
    for b in bad:
        print("FAIL " + b)
    print("digests as defined" if not bad else "%d mismatches" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
