"""The recorder's order probes (ddplab_trace._measure_order) on in-process communicators whose order this test
hides: N threads, one per rank, meet in a fake all_reduce that sums as a hidden algorithm does. A chain (rings:
one channel or several with rings of their own, chunks of any size) must be recovered, so that a replay in the
recovered order gives the hidden algorithm's bits and the seeded digest; anything else (a tree at 8 ranks,
halving-doubling at 4) must be said to be no chain.

    python3 tests/ddp_check/order_probe.py     (prints one line per case, then "all cases hold")
"""
import os
import sys
import threading

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "verify"))
from recorder_internals import T  # noqa: E402


def ring_orders(N, n, chunk, channels, perms):
    """Per element, the chain of ranks: blocks of `chunk` elements go to the channels in turn; channel c's
    ring is perms[c]; a block's sum starts at the next ring position each time the channel comes round."""
    orders = np.empty((n, N), dtype=np.int64)
    for j in range(0, (n + chunk - 1) // chunk):
        c = j % channels
        start = (j // channels) % N
        p = perms[c]
        orders[j * chunk:(j + 1) * chunk] = [p[(start + k) % N] for k in range(N)]
    return orders


def chain_sum(xs, orders):
    """xs [N, n] float32, orders [n, N]: each element's left-to-right sum, one float32 rounding per addition."""
    n = xs.shape[1]
    cols = np.arange(n)
    acc = xs[orders[:, 0], cols].copy()
    for k in range(1, xs.shape[0]):
        acc = (acc + xs[orders[:, k], cols]).astype(np.float32)
    return acc


def tree_sum(xs):
    """Binary tree: v_i = (x_i + v_2i+1) + v_2i+2 (ddplab's tree.cc); at 8 ranks two subtrees' sums meet."""
    N = xs.shape[0]
    v = [x.copy() for x in xs]
    for i in reversed(range(N)):
        for c in (2 * i + 1, 2 * i + 2):
            if c < N:
                v[i] = (v[i] + v[c]).astype(np.float32)
    return v[0]


def pairs_sum(xs):
    """Halving-doubling's grouping at 4 ranks: (x0 + x1) + (x2 + x3)."""
    return ((xs[0] + xs[1]).astype(np.float32) + (xs[2] + xs[3]).astype(np.float32)).astype(np.float32)


def run_case(N, sizes, reduce, rank=0):
    """_measure_order on N threads whose all_reduce is reduce(xs [N, n]) -> [n]; `rank`'s result."""
    deposits, results = [None] * N, {}

    def combine():
        xs = np.stack([d.numpy() for d in deposits]).astype(np.float32)
        out = reduce(xs).astype(np.float32)
        for d in deposits:
            d.copy_(torch.from_numpy(out.copy()))

    barrier = threading.Barrier(N, action=combine)
    done = threading.Barrier(N)

    def all_reduce(t, rank):
        deposits[rank] = t
        barrier.wait()
        done.wait()

    def worker(rank):
        results[rank] = T._measure_order(lambda t: all_reduce(t, rank), sizes, N, rank, torch.device("cpu"))

    threads = [threading.Thread(target=worker, args=(r,), name="rank%d" % r) for r in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        if t.is_alive():
            raise RuntimeError("a rank is still waiting in an all-reduce: the probes did not pair up")
    return results[rank]


def seeded(N, n):
    xs = []
    for r in range(N):
        g = torch.Generator()
        g.manual_seed(T._ORDER_SEED + r)
        xs.append(torch.randn(n, generator=g).numpy())
    return np.stack(xs).astype(np.float32)


def main():
    failures = 0
    rng = np.random.default_rng(5)
    chains = [  # (name, N, n, chunk, channels, perms)
        ("gloo-like ring", 3, 1000, 334, 1, [[0, 1, 2]]),
        ("one ring, chunks of 37", 5, 1001, 37, 1, [[0, 1, 2, 3, 4]]),
        ("two channels, rings of their own", 4, 4096, 64, 2, [[0, 1, 2, 3], [3, 1, 0, 2]]),
        ("eight ranks, four channels", 8, 5000, 16, 4,
         [list(rng.permutation(8)) for _ in range(4)]),
        ("fine chunks (LL-like, 4 elements)", 6, 999, 4, 2, [[0, 2, 4, 1, 3, 5], [5, 4, 3, 2, 1, 0]]),
    ]
    for name, N, n, chunk, channels, perms in chains:
        hidden = ring_orders(N, n, chunk, channels, perms)
        out, calls = run_case(N, [n], lambda xs: chain_sum(xs, hidden))
        entry = out[0]
        ok = entry["runs"] is not None
        if ok:
            got = np.empty((n, N), dtype=np.int64)
            for b, e, order in entry["runs"]:
                got[b:e] = order
            data = rng.standard_normal((N, n)).astype(np.float32)
            ok = np.array_equal(chain_sum(data, got).view(np.int32), chain_sum(data, hidden).view(np.int32))
            ok = ok and T._digest(torch.from_numpy(chain_sum(seeded(N, n), got))) == entry["digest"]
            ok = ok and calls == N * (N - 1) // 2 + 1
        print("%s %s: N=%d n=%d, %s, %d all-reduces" % ("ok  " if ok else "FAIL", name, N, n,
              "%d runs recovered" % len(entry["runs"]) if entry["runs"] else entry.get("why"), calls))
        failures += not ok
    for name, N, n, reduce in [("tree at 8 ranks", 8, 300, tree_sum), ("pairs of pairs at 4 ranks", 4, 300, pairs_sum)]:
        out, calls = run_case(N, [n], reduce)
        entry = out[0]
        ok = entry["runs"] is None and "no chain" in entry.get("why", "")
        print("%s %s: N=%d n=%d: %s" % ("ok  " if ok else "FAIL", name, N, n, entry.get("why")))
        failures += not ok
    # One rank fails to decode (its memory, say): it still takes part in every all-reduce, so no rank hangs;
    # its entry says why, the others' are whole.
    original = T._probe_maxpos

    def failing(result, N):
        if threading.current_thread().name == "rank1":
            raise MemoryError("injected")
        return original(result, N)

    T._probe_maxpos = failing
    try:
        hidden = ring_orders(4, 500, 125, 1, [[0, 1, 2, 3]])
        out0, _ = run_case(4, [500], lambda xs: chain_sum(xs, hidden), 0)
        out1, _ = run_case(4, [500], lambda xs: chain_sum(xs, hidden), 1)
        ok = out0[0]["runs"] is not None and out1[0]["runs"] is None and "MemoryError" in out1[0]["why"]
    except RuntimeError as e:
        ok, out1 = False, [{"why": str(e)}]
    finally:
        T._probe_maxpos = original
    print("%s a rank whose decoding fails takes part in every all-reduce: %s" % ("ok  " if ok else "FAIL",
                                                                                out1[0].get("why")))
    failures += not ok
    if failures:
        print("%d cases FAILED" % failures)
        sys.exit(1)
    print("all cases hold")


if __name__ == "__main__":
    main()
