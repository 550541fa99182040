"""Lab 008's training script: notebook 001's kind of DDP loop (an MLP, cross-entropy, SGD, 2 ranks on Gloo),
written with one classic mistake or none, traced by ddplab_trace.DDPTrace (the three lines marked "ddplab").

    /usr/bin/python3 notebooks_ported/008_ddp_check/train.py --mistake no-sampler|no-set-epoch|none --out RUN_DIR
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "verify"))
from ddplab_trace import DDPTrace  # noqa: E402  ddplab


def train(rank, world_size, args):
    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    if args.mistake == "no-sampler":  # every rank iterates the whole dataset, in the same order
        loader = DataLoader(dataset, batch_size=8)
        sampler = None
    else:
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
        loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    trace = DDPTrace(ddp, optimizer, args.out)  # ddplab
    for epoch in range(2):
        if sampler is not None and args.mistake != "no-set-epoch":
            sampler.set_epoch(epoch)  # without it every epoch is shuffled alike
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(ddp(x), y).backward()
            optimizer.step()
    trace.close()  # ddplab


def worker(rank, args, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        train(rank, 2, args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--mistake", choices=["no-sampler", "no-set-epoch", "none"], default="none")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=2, join=True)
