#!/usr/bin/python3
"""Questions 2 and 9 on the installed torch (1.13 or 2.x): does DDP average or sum, what dividing the loss does,
and gradient accumulation under no_sync() both ways, at world sizes 2, 3 and 4.

Real torch DDP (CPU, gloo, the ranks forked by torch.multiprocessing.start_processes once per world size, fresh
file:// rendezvous, 5 s timeout per collective, 60 s a world size). Model Linear(6,8)-Tanh-Linear(8,1), MSELoss;
W ranks, each taking K = 4 micro-batches of B = 4 samples of one dataset of W x K x B samples (rank r its r-th
contiguous K x B), so one device at batch W x K x B sees the same samples. Compared in float64:
  averaging: .grad after DDP of one backward over the rank's K x B samples, against (1/W) x the sum of the ranks'
             own gradients (all-gathered) and against one device's gradient; and against DDP with (loss / W).
  no_sync:   K micro-batches, the first K - 1 under no_sync(): with (loss / K).backward() against one device's
             gradient; with loss.backward() the ratio to it.
  misuse:    three SGD steps of that accumulation, the synchronised micro-batch the last, the first or none:
             whether every rank's replica is bitwise rank 0's.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 sim/questions/averaging.py [--world-size 2,3,4]
"""
import argparse
import contextlib
import os
import sys

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import forked

K, B = 4, 4
WORLD = [0]  # the world size of the ranks being forked (fork: they inherit it)


def data(n):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, 6, generator=g)
    return x, (x[:, :1] - 2 * x[:, 1:2]).tanh() + 0.1 * torch.randn(n, 1, generator=g)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))


def flat(m, what='grad'):
    return torch.cat([(p.grad if what == 'grad' else p.detach()).reshape(-1) for p in m.parameters()]).double()


def rel(a, b):
    return float((a - b).norm() / b.norm())


def ratio(a, b):
    """(smallest, largest) of a / b over the entries where b is not zero."""
    r = a[b != 0] / b[b != 0]
    return float(r.min()), float(r.max())


def accumulate(net, xs, ys, way, sync_on='last'):
    """One optimizer step's K backwards; the one outside no_sync() is micro-batch `sync_on` (or none)."""
    for k in range(K):
        synced = (sync_on == 'last' and k == K - 1) or (sync_on == 'first' and k == 0)
        with contextlib.nullcontext() if synced else net.no_sync():
            loss = nn.functional.mse_loss(net(xs[k]), ys[k])
            (loss / K if way == 'divide' else loss).backward()


def worker(rank, work):
    ws = WORLD[0]
    torch.set_num_threads(1)
    forked.init(rank, work, ws)
    x, y = data(ws * K * B)
    lo = rank * K * B
    xr, yr = x[lo:lo + K * B], y[lo:lo + K * B]
    one = model()
    nn.functional.mse_loss(one(x), y).backward()
    one = flat(one)
    out = {}

    ddp = DDP(model())
    nn.functional.mse_loss(ddp(xr), yr).backward()
    g = flat(ddp.module)
    own = model()
    nn.functional.mse_loss(own(xr), yr).backward()
    gs = [torch.zeros_like(g) for _ in range(ws)]
    dist.all_gather(gs, flat(own))
    divided = DDP(model())
    (nn.functional.mse_loss(divided(xr), yr) / ws).backward()
    out['mean'], out['one'] = rel(g, sum(gs) / ws), rel(g, one)
    out['divided'] = ratio(g, flat(divided.module))

    xs, ys = xr.split(B), yr.split(B)
    for way in ('divide', 'sum'):
        net = DDP(model())
        accumulate(net, xs, ys, way)
        out[way] = rel(flat(net.module), one) if way == 'divide' else ratio(flat(net.module), one)

    for sync_on in ('last', 'first', 'never'):
        net = DDP(model())
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            accumulate(net, xs, ys, 'divide', sync_on)
            opt.step()
        p = flat(net.module, 'param').float()
        ps = [torch.zeros_like(p) for _ in range(ws)]
        dist.all_gather(ps, p)
        out['replicas_' + sync_on] = sum(int(not torch.equal(q, ps[0])) for q in ps[1:])
    if rank == 0:
        forked.report(work, rank, out)
    forked.leave(work, rank, ws)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--world-size', default='2,3,4', help='comma-separated world sizes, each 2 or more')
    sizes = [int(s) for s in p.parse_args().world_size.split(',') if s.strip().isdigit()]
    if not sizes or min(sizes) < 2:
        print(f'averaging.py: --world-size {p.parse_args().world_size}: world sizes of 2 ranks or more, '
              f'comma-separated', file=sys.stderr)
        return 2
    print(f"fact: torch {torch.__version__.split('+')[0]}, world sizes {', '.join(map(str, sizes))}, "
          f"{K} micro-batches of {B} samples a rank")
    for ws in sizes:
        WORLD[0] = ws
        reports = forked.run(worker, ws)
        if not reports:
            return 1
        r = reports[0]
        print(f"answer: world_size {ws}: DDP averages: .grad is (1/{ws}) x the sum of the ranks' own gradients "
              f"(relative difference {r['mean']:.1g}) and one device's over all {ws * K * B} samples "
              f"({r['one']:.1g}); with (loss / {ws}).backward() every gradient is {ws} times smaller "
              f"(ratio {r['divided'][0]:.6g} to {r['divided'][1]:.6g})")
        print(f"answer: world_size {ws}: no_sync() over {K} micro-batches with (loss / {K}).backward() is one "
              f"device at batch {ws * K * B} (relative difference {r['divide']:.1g}); with loss.backward() the "
              f"gradient is {K} times one device's (ratio {r['sum'][0]:.6g} to {r['sum'][1]:.6g})")
        print(f"answer: world_size {ws}: after 3 SGD steps, ranks whose replica differs from rank 0's: "
              f"{r['replicas_last']} of {ws - 1} synchronising the last micro-batch, {r['replicas_first']} the "
              f"first, {r['replicas_never']} none")
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
