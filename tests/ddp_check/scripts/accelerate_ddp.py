"""Clean run: Hugging Face accelerate as its docs use it, traced with what accelerator.prepare returns:
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=K)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(loss); optimizer.step(); optimizer.zero_grad()
    trace = DDPTrace(model, optimizer, RUN_DIR)   # DDP and an AcceleratedOptimizer
Under accumulate the AcceleratedOptimizer is stepped on every micro-batch and steps the SGD inside only on
every K-th (the others run under DDP's no_sync): those are the run's optimizer steps. The ranks start as the
other scripts' do (Gloo); accelerate reads RANK, WORLD_SIZE and LOCAL_RANK as torchrun would set them. torch 2.x
(accelerate from tools/install_deps.sh --with-torch2).

    python3 accelerate_ddp.py --out RUN_DIR [--accumulate K] [...the common options]
"""
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import common
from ddplab_trace import DDPTrace


def main(rank, world_size, args):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size))
    from accelerate import Accelerator
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=args.accumulate)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 10), torch.randint(0, 3, (96,)))
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=4, shuffle=True))
    trace = DDPTrace(model, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    loss_fn = nn.CrossEntropyLoss()
    micro = 0
    for x, y in loader:
        with accelerator.accumulate(model):
            accelerator.backward(loss_fn(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
        micro += 1
        if micro == args.steps * args.accumulate:
            break
    if trace:
        trace.close()
    common.save_final(model, args)


def options(p):
    p.add_argument("--accumulate", type=int, default=2, help="gradient_accumulation_steps")


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=3, extra=options))
