#!/usr/bin/python3
"""Ranks with different batch sizes: what DDP's average computes against the mean over all the samples.

Real torch DDP (CPU, gloo, 3 ranks forked by torch.multiprocessing.start_processes, fresh file:// rendezvous,
5 s timeout per collective, 60 s for the script). Model Linear(6,4)-ReLU-Linear(4,1), MSELoss, one backward;
rank r takes a batch of BATCHES[r] samples of one dataset of sum(BATCHES). Compared, in float64 for the error:
  ddp:      .grad after DDP: each rank's mean-loss gradient times 1/world_size, summed: every rank weighs 1/3,
            whatever its batch size.
  one:      one device's gradient of the mean loss over all the samples: every sample weighs 1/N.
  weighted: the fix, DDP with each rank's loss written as sum of its samples' losses * world_size / N (N the
            all-reduced sample count): DDP's 1/world_size then makes it the mean over all N.
Also at equal batch sizes (the control): DDP's average is the mean over all samples up to rounding.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 sim/questions/uneven_batches.py
"""
import os

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import forked

WORLD = 3


def data(n):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, 6, generator=g)
    return x, (x[:, :1] * 2 - x[:, 1:2]).sin() + 0.1 * torch.randn(n, 1, generator=g)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 1))


def flat_grads(m):
    return torch.cat([p.grad.reshape(-1) for p in m.parameters()]).double()


def ddp_grads(rank, batches, weighted):
    x, y = data(sum(batches))
    lo = sum(batches[:rank])
    xb, yb = x[lo:lo + batches[rank]], y[lo:lo + batches[rank]]
    ddp = DDP(model())
    if weighted:
        n = torch.tensor(float(len(xb)))
        dist.all_reduce(n)  # every rank's sample count
        loss = nn.functional.mse_loss(ddp(xb), yb, reduction='sum') * WORLD / n
    else:
        loss = nn.functional.mse_loss(ddp(xb), yb)
    loss.backward()
    return flat_grads(ddp.module)


def ranks_mean(rank, batches):
    """(1/world_size) x the sum of every rank's own mean-loss gradient, in float64."""
    x, y = data(sum(batches))
    lo = sum(batches[:rank])
    m = model()
    nn.functional.mse_loss(m(x[lo:lo + batches[rank]]), y[lo:lo + batches[rank]]).backward()
    g = flat_grads(m)
    gs = [torch.zeros_like(g) for _ in range(WORLD)]
    dist.all_gather(gs, g)
    return sum(gs) / WORLD


def one_device(batches):
    x, y = data(sum(batches))
    m = model()
    nn.functional.mse_loss(m(x), y).backward()
    return flat_grads(m)


def rel(a, b):
    return float((a - b).norm() / b.norm())


def worker(rank, work):
    torch.set_num_threads(1)
    forked.init(rank, work, WORLD)
    out = {}
    for name, batches in (('uneven', [2, 4, 26]), ('even', [8, 8, 8])):
        one = one_device(batches)
        ddp, fixed = ddp_grads(rank, batches, False), ddp_grads(rank, batches, True)
        out[name] = {'batches': batches, 'ddp': rel(ddp, one), 'fixed': rel(fixed, one),
                     'ranks': rel(ddp, ranks_mean(rank, batches))}
    if rank == 0:
        forked.report(work, rank, out)
    forked.leave(work, rank, WORLD)


def main():
    reports = forked.run(worker, WORLD)
    if reports is None:
        return 1
    r = reports[0]
    u, e = r['uneven'], r['even']
    n = sum(u['batches'])
    print(f"fact: torch {torch.__version__.split('+')[0]}, world_size {WORLD}, batches {u['batches']} ({n} samples)")
    print(f"answer: with batches of {', '.join(map(str, u['batches']))} samples on 3 ranks, DDP's .grad is the "
          f"mean of the ranks' mean-loss gradients: each rank weighs 1/3 whatever its batch, so each of rank 0's "
          f"{u['batches'][0]} samples counts {n / (3 * u['batches'][0]):.3g} times as much as in the mean over all "
          f"{n}; against one device's gradient of that mean its relative error is {u['ddp']:.3g}, against "
          f"(1/3) x the sum of the ranks' own gradients {u['ranks']:.1g}")
    print(f"answer: the fix: each rank's loss as the sum of its samples' losses x world_size / N, N the "
          f"all-reduced sample count (loss = mse_loss(out, y, reduction='sum') * world_size / N): relative error "
          f"{u['fixed']:.1g} against one device, rounding only")
    print(f"answer: at equal batches ({', '.join(map(str, e['batches']))}) DDP's average is the mean over all "
          f"samples already: relative error {e['ddp']:.1g} (the fix gives {e['fixed']:.1g})")
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
