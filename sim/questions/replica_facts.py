#!/usr/bin/python3
"""What stays equal across DDP's replicas and what does not, measured on the installed torch (1.13 or 2.x).

Real torch DDP (CPU, gloo, --world-size ranks (default 3, 2 or more) forked by torch.multiprocessing.start_processes, fresh file:// rendezvous, 5 s
timeout per collective, 60 s for the script), each rank on its own batches:
  loss:      the logging idiom `dist.all_reduce(loss.detach()) / world_size`: what it raises, and what it has
             done to `loss` by then (detach() shares the loss's storage); the idiom that works.
  init_sync: DDP(model, init_sync=False) on ranks seeded apart (manual_seed(rank)): whether the replicas start
             and stay different (torch 2.x), or what torch 1.13 says of the keyword.
  buffers:   Linear-BatchNorm1d, broadcast_buffers=True (the default), 3 SGD steps: the ranks' running_mean after
             the last step, and after one more forward through DDP (eval mode, no_grad).
  zero_grad: the default of Optimizer.zero_grad's set_to_none on this torch.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 sim/questions/replica_facts.py [--world-size 3]
"""
import inspect
import os

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import forked

WORLD = 3


def spread(t):
    """max |t on any rank - t on rank 0| (every rank gets it)."""
    t = t.detach().clone()
    lo, hi = t.clone(), t.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    return float((hi - lo).max())


def rank_loss(rank):
    """This rank's loss through a DDP model: the same on every call."""
    torch.manual_seed(0)
    ddp = DDP(nn.Linear(4, 1))
    g = torch.Generator().manual_seed(10 + rank)
    x, y = torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)
    return nn.functional.mse_loss(ddp(x), y)


def loss_idiom(rank):
    loss = rank_loss(rank)
    own = float(loss.detach())
    losses = [torch.zeros(()) for _ in range(WORLD)]
    dist.all_gather(losses, loss.detach().clone())
    try:
        logged = dist.all_reduce(loss.detach()) / WORLD
        raised = f'no error ({logged})'
    except Exception as e:  # noqa: BLE001
        raised = f'{type(e).__name__}: {str(e).splitlines()[0]}'
    overwritten = float(loss.detach())
    try:
        loss.backward()
        backward = 'loss.backward() still runs'
    except Exception as e:  # noqa: BLE001
        backward = f'loss.backward() raises {type(e).__name__}'
    total = float(sum(losses))
    mean, kept = loss_fixed(rank)
    return {'raised': raised, 'own': own, 'overwritten': overwritten, 'sum': total, 'backward': backward,
            'fixed': mean, 'mean': total / WORLD, 'kept': kept == own}


def loss_fixed(rank):
    """The idiom that works: all-reduce a copy, then divide. (the mean, the loss after it)"""
    loss = rank_loss(rank)
    logged = loss.detach().clone()
    dist.all_reduce(logged)
    logged /= WORLD
    return float(logged), float(loss.detach())


def init_sync(rank):
    torch.manual_seed(rank)  # each rank its own initial weights
    model = nn.Linear(4, 4)
    try:
        ddp = DDP(model, init_sync=False)
    except TypeError as e:
        out = {'error': str(e).splitlines()[0]}
        torch.manual_seed(rank)
        synced = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
        synced[1].running_mean.normal_()
        out['buffers_before'] = spread(synced[1].running_mean)
        DDP(synced)
        out['default'], out['buffers'] = spread(synced[0].weight), spread(synced[1].running_mean)
        return out
    start = spread(model.weight)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(10 + rank)
    for _ in range(3):
        opt.zero_grad()
        nn.functional.mse_loss(ddp(torch.randn(8, 4, generator=g)), torch.randn(8, 4, generator=g)).backward()
        opt.step()
    torch.manual_seed(rank)
    synced = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    synced[1].running_mean.normal_()  # each rank its own buffer too
    buffers_before = spread(synced[1].running_mean)
    DDP(synced)
    return {'start': start, 'after': spread(model.weight), 'default': spread(synced[0].weight),
            'buffers_before': buffers_before, 'buffers': spread(synced[1].running_mean)}


def buffers(rank):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6))
    ddp = DDP(model)  # broadcast_buffers=True
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(20 + rank)
    for _ in range(3):
        opt.zero_grad()
        ddp(torch.randn(8, 4, generator=g)).square().mean().backward()
        opt.step()
    after_step = spread(model[1].running_mean)
    ddp.eval()
    with torch.no_grad():
        ddp(torch.randn(8, 4, generator=g))
    return {'after_step': after_step, 'after_forward': spread(model[1].running_mean),
            'params': spread(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))}


def worker(rank, work):
    torch.set_num_threads(1)
    forked.init(rank, work, WORLD)
    out = {'loss': loss_idiom(rank), 'init_sync': init_sync(rank), 'buffers': buffers(rank)}
    if rank == 0:
        forked.report(work, rank, out)
    forked.leave(work, rank, WORLD)


def main():
    global WORLD
    WORLD = forked.world_size_arg(WORLD, 'replicas need')
    reports = forked.run(worker, WORLD)
    if reports is None:
        return 1
    r = reports[0]
    version = torch.__version__.split('+')[0]
    L = r['loss']
    print(f"fact: torch {version}, world_size {WORLD}, rank 0")
    print(f"answer: dist.all_reduce(loss.detach()) / world_size raises {L['raised']}: all_reduce returns None; "
          f"by then rank 0's loss reads {L['overwritten']:.6g} instead of its own {L['own']:.6g}, the sum of the "
          f"{WORLD} ranks' losses ({L['sum']:.6g}): detach() shares the loss's storage and the all-reduce writes "
          f"in place ({L['backward']})")
    print(f"answer: to log the mean loss, all-reduce a copy and divide it: logged = loss.detach().clone(); "
          f"dist.all_reduce(logged); logged /= world_size gives {L['fixed']:.6g} on every rank (the mean of the "
          f"ranks' losses: {L['mean']:.6g}) and leaves loss alone ({L['kept']})")
    s = r['init_sync']
    print(f"answer: DDP(model) broadcasts rank 0's parameters and buffers at construction: ranks seeded apart end "
          f"it with weights {s['default']:.3g} apart and a BatchNorm running_mean {s['buffers']:.3g} apart (it was "
          f"{s['buffers_before']:.3g})")
    if 'error' in s:
        print(f"answer: DDP(model, init_sync=False) on torch {version}: TypeError: {s['error']}: DDP's constructor "
              f"always broadcasts here")
    else:
        print(f"answer: DDP(model, init_sync=False) on torch {version} skips the constructor's broadcast: ranks seeded "
              f"apart start with weights up to {s['start']:.3g} apart and are still {s['after']:.3g} apart after 3 "
              f"steps (every rank adds the same averaged gradient to its own weights)")
    b = r['buffers']
    print(f"answer: broadcast_buffers=True (the default) copies rank 0's buffers to every rank at the start of each "
          f"forward through DDP, so after the last training step each rank's BatchNorm running_mean is its own "
          f"(up to {b['after_step']:.3g} apart here, the parameters {b['params']:.3g}); the next forward through "
          f"DDP (eval mode here) makes them {b['after_forward']:.3g} apart: save rank 0's")
    default = inspect.signature(torch.optim.Optimizer.zero_grad).parameters['set_to_none'].default
    p = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1)
    p.sum().backward()
    opt.zero_grad()
    seen = 'None' if p.grad is None else f'zeros ({p.grad.tolist()})'
    print(f"answer: optimizer.zero_grad() on torch {version} means set_to_none={default}: .grad after it is {seen}")
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
