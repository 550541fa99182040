"""A learner-style DDP script launched by torchrun (env:// rendezvous, no mp.spawn), traced by DDPTrace:
    torchrun --standalone --nproc-per-node 2 tests/ddp_check/torchrun_mlp.py --out RUN_DIR
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "verify"))
from ddplab_trace import DDPTrace  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from torchrun
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(40, 6), torch.randn(40, 2))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=5, sampler=sampler)
    ddp = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    with DDPTrace(ddp, opt, args.out):
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for x, y in loader:
                opt.zero_grad()
                nn.functional.mse_loss(ddp(x), y).backward()
                opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
