"""A course-sized training run, the kind a DDP lab sets: an MLP of about 22K parameters (32-128-128-10) on a
synthetic 10-class dataset through DistributedSampler and a DataLoader, two micro-batches a step under
no_sync(), clip_grad_norm_, AdamW, DDP over Gloo on --world-size CPU ranks, --steps optimizer steps; traced with
verify/ddplab_trace (the same three lines a learner adds) unless --no-trace.

Prints one line: 'cpu_s <sum over ranks of the training loop's CPU seconds> wall_s <rank 0's wall seconds>',
the loop measured from the first step to the end of close() (process start, imports and init not counted).
"""
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "verify"))
from ddplab_trace import DDPTrace  # noqa: E402


def build():
    """This rank's run, after init_process_group: (sampler, loader, DDP model, optimizer)."""
    torch.manual_seed(0)
    x = torch.randn(4096, 32)
    y = (x[:, :10].argmax(1) + (x[:, 10] > 1).long()) % 10
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=32, sampler=sampler, drop_last=True)
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                                torch.nn.ReLU(), torch.nn.Linear(128, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    return sampler, loader, ddp, torch.optim.AdamW(ddp.parameters(), lr=1e-3)


def train(sampler, loader, ddp, opt, steps):
    """`steps` optimizer steps, epoch after epoch: two micro-batches a step, the first under no_sync(), a clip."""
    step, epoch = 0, 0
    while step < steps:
        sampler.set_epoch(epoch)
        it = iter(loader)
        while step < steps:
            try:
                micro = [next(it), next(it)]
            except StopIteration:
                break
            opt.zero_grad(set_to_none=True)
            with ddp.no_sync():
                xb, yb = micro[0]
                (F.cross_entropy(ddp(xb), yb) / 2).backward()
            xb, yb = micro[1]
            (F.cross_entropy(ddp(xb), yb) / 2).backward()
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), 0.5)
            opt.step()
            step += 1
        epoch += 1


def worker(rank, args, port, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
    sampler, loader, ddp, opt = build()
    trace = DDPTrace(ddp, opt, args.out) if args.trace else None
    dist.barrier()
    c0, t0 = time.process_time(), time.perf_counter()
    train(sampler, loader, ddp, opt, args.steps)
    if trace:
        trace.close()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    out[rank] = cpu
    dist.barrier()
    if rank == 0:
        out[args.world_size] = wall
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="")
    p.add_argument("--world-size", type=int, default=3)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--no-trace", dest="trace", action="store_false")
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mp.get_context("spawn").Array("d", args.world_size + 1)
    mp.spawn(worker, args=(args, port, out), nprocs=args.world_size, join=True)
    print("cpu_s %.3f wall_s %.3f" % (sum(out[:args.world_size]), out[args.world_size]), flush=True)


if __name__ == "__main__":
    main()
