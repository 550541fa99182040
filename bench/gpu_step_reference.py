#!/usr/bin/env python3
"""PyTorch reference for //bench:gpu_step: one DDP training step on cuda:0, world size 1, nccl backend.

Same work as ddplab's device-resident step: nn.Sequential of Linear layers with ReLU between, MSELoss, SGD,
DistributedDataParallel with its defaults (buckets, gradient copies into them, all-reduce). Each step
copies its batch from pinned host memory (cycling through 8 batches), runs forward, loss, zero_grad,
backward, step. Float32 throughout (TF32 off). Timing: --warmup steps, torch.cuda.synchronize(), then
--steps steps, synchronize again; prints a line naming torch and the GPU, then `ms_per_step X`.
Works on torch 1.13 and 2.x; needs a GPU (without one it says why and exits 3).
"""
import argparse
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--layers', default='1024,4096,4096,1024')
    ap.add_argument('--batch', type=int, default=64)
    ap.add_argument('--lr', type=float, default=0.01)
    ap.add_argument('--warmup', type=int, default=10)
    ap.add_argument('--steps', type=int, default=50)
    a = ap.parse_args()
    if not torch.cuda.is_available() or not dist.is_available() or not dist.is_nccl_available():
        print('torch %s: no CUDA device or no NCCL here' % torch.__version__)
        sys.exit(3)
    torch.backends.cuda.matmul.allow_tf32 = False  # ddplab's cuBLAS calls are plain float32 too
    torch.backends.cudnn.allow_tf32 = False
    sizes = [int(v) for v in a.layers.split(',')]
    torch.cuda.set_device(0)
    dev = torch.device('cuda', 0)
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group('nccl', init_method='file://' + os.path.join(d, 'init'), rank=0, world_size=1)
        torch.manual_seed(12345)
        linears = [nn.Linear(n_in, n_out) for n_in, n_out in zip(sizes, sizes[1:])]
        layers = linears[:1] + [m for linear in linears[1:] for m in (nn.ReLU(), linear)]  # a ReLU between two
        model = DDP(nn.Sequential(*layers).to(dev), device_ids=[0])
        opt = torch.optim.SGD(model.parameters(), lr=a.lr)
        loss_fn = nn.MSELoss()
        torch.manual_seed(0)
        xs = [torch.randn(a.batch, sizes[0]).pin_memory() for _ in range(8)]
        ys = [torch.randn(a.batch, sizes[-1]).pin_memory() for _ in range(8)]

        def step(i):
            x = xs[i % 8].to(dev, non_blocking=True)
            y = ys[i % 8].to(dev, non_blocking=True)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        for i in range(a.warmup):
            step(i)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(a.steps):
            step(a.warmup + i)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3 / a.steps
        print('torch %s on %s' % (torch.__version__, torch.cuda.get_device_name(0)))
        print('ms_per_step %.6f' % ms, flush=True)
        dist.destroy_process_group()


if __name__ == '__main__':
    main()
