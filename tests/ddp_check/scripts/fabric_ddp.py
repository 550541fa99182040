"""Clean run: Lightning Fabric as its docs use it, traced with what fabric.setup returns:
    fabric = Fabric(accelerator="cpu", devices=3, strategy="ddp"); fabric.launch()
    model, optimizer = fabric.setup(model, optimizer); loader = fabric.setup_dataloaders(loader)
    ... fabric.backward(loss); optimizer.step()
    trace = DDPTrace(model, optimizer, RUN_DIR)   # a _FabricModule and a _FabricOptimizer
Fabric starts the 3 ranks itself (Gloo) and adds the DistributedSampler. An MLP, SGD with momentum. torch 2.x
(Lightning from tools/install_deps.sh --with-torch2); torch 1.13 has no Lightning here.

    python3 fabric_ddp.py --out RUN_DIR [--steps S] [--every K] [--full] [--no-trace] [--final FILE.pt]
                          [--no-setup-dataloaders]

--no-setup-dataloaders, the mistake: the DataLoader is used as it is, so every rank (seeded alike by
seed_everything) shuffles the whole dataset alike and trains on the same batches.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
from lightning.fabric import Fabric
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "verify"))
from ddplab_trace import DDPTrace  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--full", action="store_true")
    p.add_argument("--no-trace", dest="trace", action="store_false")
    p.add_argument("--final")
    p.add_argument("--no-setup-dataloaders", dest="setup_dataloaders", action="store_false")
    args = p.parse_args()
    torch.set_num_threads(1)
    fabric = Fabric(accelerator="cpu", devices=3, strategy="ddp")
    fabric.launch()
    fabric.seed_everything(0)
    data = TensorDataset(torch.randn(48, 10), torch.randint(0, 3, (48,)))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    if args.setup_dataloaders:
        loader = fabric.setup_dataloaders(loader)
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    trace = DDPTrace(model, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    for epoch in range(100):
        for x, y in loader:
            optimizer.zero_grad()
            fabric.backward(loss_fn(model(x), y))
            optimizer.step()
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    if args.final:
        mine = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
        every = fabric.all_gather_object(mine) if hasattr(fabric, "all_gather_object") else None
        if every is None:
            import torch.distributed as dist
            every = [None] * fabric.world_size
            dist.all_gather_object(every, mine)
        if fabric.global_rank == 0:
            torch.save({r: d for r, d in enumerate(every)}, args.final)


if __name__ == "__main__":
    main()
