"""The all-reduce's addition order, measured at close() on values whose sums tell each element's chain."""


import torch

from .common import _why
from .digests import _digest


_ORDER_SEED = 20261128
_MAX_ORDER_RUNS = 1 << 16  # per size: more runs than this (an order changing every few elements) is not kept


def _order_pairs(N):
    return [(a, b) for a in range(N) for b in range(a + 1, N)]


def _probe_values(N, rank, a, b):
    return 1073741824.0 if rank == a else -1073741824.0 if rank == b else 1.0


_NO_CHAIN = "element %d of %d is summed in no chain of the ranks (a tree, or partial sums added together)"


def _probe_maxpos(result, N):
    """A probe's sums as max(pos a, pos b) per element (int8), or None where some sum no chain gives."""
    mp = (N - 1) - result.double()
    ok = (mp == mp.round()) & (mp >= 1) & (mp <= N - 1)
    if not bool(ok.all()):
        return None, int((~ok).nonzero()[0])
    return mp.to(torch.int8), -1


def _decode_chain(maxpos, N):
    """maxpos: [P, n] int8, each probe's max(pos a, pos b) in _order_pairs order. (runs, why): runs [[begin,
    end, [ranks in the order added]], ...] covering [0, n), or None and why not."""
    n = maxpos.shape[1]
    dev = maxpos.device
    pos = torch.full((N, n), N, dtype=torch.long, device=dev)
    for k, (a, b) in enumerate(_order_pairs(N)):
        pos[a] = torch.minimum(pos[a], maxpos[k].long())
        pos[b] = torch.minimum(pos[b], maxpos[k].long())
    # The two ranks at position 1 are the first pair: the lower one takes position 0 (the pair commutes).
    order = (pos * N + torch.arange(N, device=dev).view(N, 1)).argsort(0)  # [N, n]: ranks in the order added
    del pos
    placed = torch.empty((N, n), dtype=torch.long, device=dev)
    placed.scatter_(0, order, torch.arange(N, device=dev).view(N, 1).expand(N, n).contiguous())
    placed.clamp_(min=1)                             # position 0 probes as 1
    for k, (a, b) in enumerate(_order_pairs(N)):    # every probe must be what this chain gives
        wrong = torch.maximum(placed[a], placed[b]) != maxpos[k].long()
        if bool(wrong.any()):
            return None, _NO_CHAIN % (int(wrong.nonzero()[0]), n)
    del placed
    order = order.t().contiguous()                  # [n, N]
    starts = torch.ones(n, dtype=torch.bool, device=dev)
    if n > 1:
        starts[1:] = (order[1:] != order[:-1]).any(1)
    begin = starts.nonzero().view(-1)
    if begin.numel() > _MAX_ORDER_RUNS:
        return None, "the order changes %d times over %d elements (over %d runs: not kept)" % (
            begin.numel(), n, _MAX_ORDER_RUNS)
    firsts = order[begin].cpu().tolist()
    begin = begin.cpu().tolist()
    return [[b, e, f] for b, e, f in zip(begin, begin[1:] + [n], firsts)], ""


def _measure_order(all_reduce, sizes, N, rank, device, buf=None):
    """The chain order of each size's SUM all-reduce, through `all_reduce(tensor)` (in place, every rank at
    once): [{"n", "runs" (or null and "why"), "digest" of the seeded sum}], and how many all-reduces it took.
    Every rank makes the same all-reduces whatever goes wrong on it: the probes pair up across ranks, so a
    rank that failed to decode (memory: n bytes per pair of ranks on `device`) still takes part, with the
    preallocated `buf` (max(sizes) floats on `device`), and its entry says why."""
    out, calls = [], 0
    pairs = _order_pairs(N)
    if buf is None:
        buf = torch.empty(max(sizes), dtype=torch.float32, device=device)
    for n in sizes:
        t = buf[:n]
        maxpos, bad, why = None, -1, ""
        try:
            maxpos = torch.empty((len(pairs), n), dtype=torch.int8, device=device)
        except Exception as e:
            why = _why(e, "order probes")
        for k, (a, b) in enumerate(pairs):
            t.fill_(_probe_values(N, rank, a, b))
            all_reduce(t)
            calls += 1
            if maxpos is None:
                continue
            try:
                mp, at = _probe_maxpos(t, N)
                if mp is None:
                    bad = at if bad < 0 else min(bad, at)
                else:
                    maxpos[k] = mp
            except Exception as e:
                maxpos, why = None, _why(e, "order probes")
        runs = None
        if maxpos is not None:
            try:
                runs, why = (None, _NO_CHAIN % (bad, n)) if bad >= 0 else _decode_chain(maxpos, N)
            except Exception as e:
                runs, why = None, _why(e, "order probes")
        del maxpos
        digest = None
        try:
            g = torch.Generator()
            g.manual_seed(_ORDER_SEED + rank)
            t.copy_(torch.randn(n, generator=g))
        except Exception as e:
            runs, why = None, _why(e, "order probes")
        all_reduce(t)
        calls += 1
        try:
            digest = _digest(t)
        except Exception as e:
            runs, why = None, _why(e, "order probes")
        entry = {"n": n, "runs": runs, "digest": digest if digest is not None else 0}
        if runs is None:
            entry["why"] = why
        out.append(entry)
    return out, calls
