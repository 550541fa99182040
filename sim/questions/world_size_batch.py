#!/usr/bin/python3
"""World size 2 against 4 at one global batch: what moves, measured on the installed torch (1.13 or 2.x).

Real torch DDP (CPU, gloo, 4 ranks forked by torch.multiprocessing.start_processes, the world_size 2 runs on a
group of ranks 0 and 1; fresh file:// rendezvous, 5 s timeout per collective, 60 s for the script). 64 samples,
DistributedSampler(shuffle=False): at world_size 2 a batch of 8 per rank, at 4 a batch of 4, so every step's 16
samples are the same ones; one device takes them as a batch of 16. SGD(lr=0.1), 4 steps. Two models:
  mlp: Linear(6,16)-ReLU-Linear(16,1)
  bn:  Linear(6,16)-BatchNorm1d(16)-ReLU-Linear(16,1)
Compared: every rank 0's parameters at world_size 2, at 4 and on one device, bitwise and by the largest
difference.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 sim/questions/world_size_batch.py
"""
import os

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import forked

GLOBAL, STEPS = 16, 4


def dataset():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(GLOBAL * STEPS, 6, generator=g)
    return TensorDataset(x, (x[:, :1] - 2 * x[:, 1:2]).tanh())


def model(kind):
    torch.manual_seed(0)
    if kind == 'mlp':
        return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))


def train(kind, ws, rank, pg):
    m = model(kind)
    net = DDP(m, process_group=pg) if pg is not None else m
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    data = dataset()
    sampler = DistributedSampler(data, num_replicas=ws, rank=rank, shuffle=False) if pg is not None else None
    for x, y in DataLoader(data, batch_size=GLOBAL // ws, sampler=sampler):
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def worker(rank, work):
    torch.set_num_threads(1)
    forked.init(rank, work, 4)
    pair = dist.new_group([0, 1])
    out = {}
    for kind in ('mlp', 'bn'):
        four = train(kind, 4, rank, dist.group.WORLD)
        two = train(kind, 2, rank, pair) if rank < 2 else None
        dist.barrier()
        if rank == 0:
            one = train(kind, 1, 0, None)
            out[kind] = {'differ': int((two.view(torch.int32) != four.view(torch.int32)).sum()), 'n': two.numel(),
                         'max': float((two - four).abs().max()), 'two_one': float((two - one).abs().max()),
                         'four_one': float((four - one).abs().max()), 'scale': float(one.abs().max())}
    if rank == 0:
        forked.report(work, rank, out)
    forked.leave(work, rank, 4)


def main():
    reports = forked.run(worker, 4)
    if reports is None:
        return 1
    r = reports[0]
    m, b = r['mlp'], r['bn']
    print(f"fact: torch {torch.__version__.split('+')[0]}, global batch {GLOBAL} (world_size 2 x 8, 4 x 4, one "
          f"device x 16), {STEPS} SGD steps")
    print(f"answer: without BatchNorm, world_size 2 and 4 at one global batch train the same model up to rounding: "
          f"{m['differ']} of {m['n']} floats end in other bits, by up to {m['max']:.2g} (parameters up to "
          f"{m['scale']:.2g}): the mean over the 16 samples is added in another order (each rank's mean of 8 or 4, "
          f"then the all-reduce); against one device, up to {m['two_one']:.2g} and {m['four_one']:.2g}")
    print(f"answer: with BatchNorm the world size changes the model: each rank normalises its own 8 or 4 samples, "
          f"so world_size 2 and 4 end up to {b['max']:.2g} apart, against one device up to {b['two_one']:.2g} and "
          f"{b['four_one']:.2g}: not rounding; SyncBatchNorm (on GPUs) normalises over all 16 instead")
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
