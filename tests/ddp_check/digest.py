"""The recorder's digest (verify/ddplab_trace _digest, "digest": "fold64") against its definition in
docs/trace_format.md, written here the slow way with numpy: random tensors of every length class (empty, one
float, an odd tail, a partial last row of 1021 words, many rows), a view at an odd offset (a bucket view), a
transposed matrix. Then the digests of the fixed vectors tests/check_trace_test.cc gives ddp_check's fold64_of
(src/check/trace.cc): values whose float32 bits are i * 2654435761 mod 2^32, i = 0 .. n-1.

    python tests/ddp_check/digest.py      (prints the fixed vectors' digests; exit status 1 on a mismatch)
"""
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


def fixed(n):
    bits = (np.arange(n, dtype=np.uint64) * np.uint64(2654435761)) % np.uint64(1 << 32)
    return torch.from_numpy(bits.astype(np.uint32).view(np.float32).copy())


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
    for b in bad:
        print("FAIL " + b)
    print("digests as defined" if not bad else "%d mismatches" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
