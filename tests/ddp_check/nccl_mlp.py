"""A learner-style DDP run on NCCL for ddp_check, for the GPU machine (tools/gpu_checks.sh run OUT check):
an MLP, SGD with momentum, DistributedSampler with set_epoch, every rank on cuda:0 (each rank poses as its
own host, NCCL_HOSTID, so NCCL connects ranks that share one GPU over sockets), traced by DDPTrace.

    python3 tests/ddp_check/nccl_mlp.py --out RUN_DIR [--world-size 3] [--steps 6]

Pinned (NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_MIN_NCHANNELS=1 NCCL_MAX_NCHANNELS=1 in the environment) ddp_check
predicts it bit for bit in the order it knows; unpinned, DDPTrace measures NCCL's own order at close()
(measure_order="auto") and ddp_check replays it where NCCL summed along rings, else compares allclose and says
why. Run pinned and unpinned on an H200 (torch 2.11) before the order was measured: 108/108 exact pinned,
90/108 unpinned; the measured order has not yet run on a GPU.
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
from ddplab_trace import DDPTrace  # noqa: E402


def worker(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_HOSTID="ddplab-rank%d" % rank)
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=args.world_size)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 32), torch.randint(0, 4, (96,)))
    sampler = DistributedSampler(data, num_replicas=args.world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4)).cuda()
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[0])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    trace = DDPTrace(ddp, opt, args.out)
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(x.cuda()), y.cuda()).backward()
            opt.step()
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    trace.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--world-size", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.world_size, join=True)
