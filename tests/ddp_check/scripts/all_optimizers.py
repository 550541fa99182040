"""Clean runs: every optimizer class in torch.optim (and the variants learners reach for: Adam with amsgrad, SGD
with Nesterov momentum, centered RMSprop, ...), one after another in one group of 3 ranks, each its own DDP model
and its own trace in RUN_DIR/<name>/. ddp_check predicts DDP's gradients for all of them and the optimizer's step
where it models the optimizer; for the others it says not-checked. None is a problem.

    python3 all_optimizers.py --out RUN_DIR [--optimizer NAME] [--list] [...the common options]

The list is torch's own (every torch.optim.Optimizer subclass of the torch that runs it, so Adafactor and Muon
on a torch 2.x that has them) plus the variants below; --optimizer runs one. Models: a small MLP; Muon (2-D
parameters only) gets the same MLP without biases; SparseAdam (sparse gradients only) an nn.Embedding(sparse=True)
whose output goes through a fixed projection buffer.
"""
import inspect
import os

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace

# name: (class name, keyword arguments besides the parameters)
VARIANTS = {
    "SGD": ("SGD", dict(lr=0.1, momentum=0.9)),
    "SGD_nesterov": ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    "Adam": ("Adam", dict(lr=1e-2)),
    "Adam_amsgrad": ("Adam", dict(lr=1e-2, amsgrad=True)),
    "Adam_maximize": ("Adam", dict(lr=1e-2, maximize=True)),
    "AdamW": ("AdamW", dict(lr=1e-2, weight_decay=0.05)),
    "AdamW_amsgrad": ("AdamW", dict(lr=1e-2, weight_decay=0.05, amsgrad=True)),
    "Adadelta": ("Adadelta", dict(lr=1.0)),
    "Adagrad": ("Adagrad", dict(lr=0.1)),
    "Adamax": ("Adamax", dict(lr=2e-2)),
    "ASGD": ("ASGD", dict(lr=0.05)),
    "LBFGS": ("LBFGS", dict(lr=0.1)),
    "NAdam": ("NAdam", dict(lr=2e-2)),
    "RAdam": ("RAdam", dict(lr=1e-2)),
    "RMSprop": ("RMSprop", dict(lr=1e-2)),
    "RMSprop_centered": ("RMSprop", dict(lr=1e-2, momentum=0.9, centered=True)),
    "Rprop": ("Rprop", dict(lr=1e-2)),
    "SparseAdam": ("SparseAdam", dict(lr=1e-2)),
    "Adafactor": ("Adafactor", dict(lr=1e-2)),
    "Muon": ("Muon", dict(lr=2e-2)),
}


def optimizer_names():
    """VARIANTS' names whose class this torch has, then any other torch.optim optimizer at its defaults."""
    classes = {n for n, c in vars(torch.optim).items()
               if inspect.isclass(c) and issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer}
    names = [n for n, (cls, _) in VARIANTS.items() if cls in classes]
    names += sorted(c for c in classes if c not in names)
    return names


class SparseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 8, sparse=True)
        self.register_buffer("proj", torch.randn(8, 3))

    def forward(self, tokens):
        return self.embed(tokens).mean(1) @ self.proj


def run_one(name, rank, world_size, args):
    cls, kwargs = VARIANTS.get(name, (name, {}))
    torch.manual_seed(0)
    if cls == "SparseAdam":
        data = TensorDataset(torch.randint(0, 50, (36, 4)), torch.randint(0, 3, (36,)))
        model = SparseNet()
    else:
        data = TensorDataset(torch.randn(36, 10), torch.randint(0, 3, (36,)))
        bias = cls != "Muon"
        model = nn.Sequential(nn.Linear(10, 32, bias=bias), nn.ReLU(), nn.Linear(32, 3, bias=bias))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    ddp = DDP(model)
    optimizer = getattr(torch.optim, cls)(ddp.parameters(), **kwargs)
    loss_fn = nn.CrossEntropyLoss()

    trace = DDPTrace(ddp, optimizer, os.path.join(args.out, name), every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            if cls == "LBFGS":
                def closure():
                    optimizer.zero_grad()
                    loss = loss_fn(ddp(x), y)
                    loss.backward()
                    return loss
                optimizer.step(closure)
            else:
                optimizer.zero_grad()
                loss_fn(ddp(x), y).backward()
                optimizer.step()
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    return {name + "/" + n: p.detach().cpu().clone() for n, p in ddp.module.named_parameters()}


def main(rank, world_size, args):
    names = [args.optimizer] if args.optimizer else optimizer_names()
    final = {}
    for name in names:
        final.update(run_one(name, rank, world_size, args))
        if rank == 0:
            print("all_optimizers: %s ran %d steps" % (name, args.steps), flush=True)
    common.save_final_params(final, args)


def options(p):
    p.add_argument("--optimizer", help="run this one only (a name of --list)")
    p.add_argument("--list", action="store_true", help="print the names this torch runs, and exit")


if __name__ == "__main__":
    a = common.parse_args(world_size=3, steps=3, extra=options)
    if a.list:
        print("\n".join(optimizer_names()))
    else:
        common.launch(main, a)
