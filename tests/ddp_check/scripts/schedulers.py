"""Clean runs: every scheduler of torch.optim.lr_scheduler, and a loop that sets hyperparameters by hand, one
after another in one group of 3 ranks, each its own DDP model and trace in RUN_DIR/<name>/. OneCycleLR and
CyclicLR change SGD's momentum (or Adam's betas) with the lr at every step; the hand-set loop changes lr,
momentum, dampening, weight_decay and nesterov (SGD) or lr, betas, eps and weight_decay (Adam, AdamW). The
trace records every hyperparameter of every param group as step() reads it, so none is a problem.

    python3 schedulers.py --out RUN_DIR [--scheduler NAME] [--list] [...the common options]

--list prints the names: one per scheduler class of the torch that runs it (ddp_check_test checks that none is
missing) and the variants below.
"""
import inspect
import os

import torch
import torch.nn as nn
import torch.optim.lr_scheduler as sched
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace

S = 5  # steps: every scheduler changes something within them


def _hand_sgd(opt, step):  # a learner's own warm-up: every SGD hyperparameter, by hand
    for g in opt.param_groups:
        g["lr"] = 0.02 * (step + 1)
        g["momentum"] = 0.5 + 0.1 * step
        g["dampening"] = 0.1 * step if step % 2 == 0 else 0.0  # nesterov needs dampening 0
        g["weight_decay"] = 1e-3 * step
        g["nesterov"] = step % 2 == 1


def _hand_adam(opt, step):
    for g in opt.param_groups:
        g["lr"] = 1e-2 / (step + 1)
        g["betas"] = (0.8 + 0.03 * step, 0.99 - 0.001 * step)
        g["eps"] = 1e-8 * (10 ** step)
        g["weight_decay"] = 0.01 * step


# name: (optimizer class, its keyword arguments, scheduler factory(opt) or None, hand-set function or None)
SGD, ADAM = ("SGD", dict(lr=0.1, momentum=0.9)), ("Adam", dict(lr=1e-2))
CASES = {
    "LambdaLR": SGD + (lambda o: sched.LambdaLR(o, lambda s: 0.7 ** s), None),
    "MultiplicativeLR": SGD + (lambda o: sched.MultiplicativeLR(o, lambda s: 0.8), None),
    "StepLR": SGD + (lambda o: sched.StepLR(o, step_size=2, gamma=0.3), None),
    "MultiStepLR": SGD + (lambda o: sched.MultiStepLR(o, milestones=[1, 3], gamma=0.5), None),
    "ConstantLR": SGD + (lambda o: sched.ConstantLR(o, factor=0.5, total_iters=2), None),
    "LinearLR": SGD + (lambda o: sched.LinearLR(o, start_factor=0.2, total_iters=4), None),
    "ExponentialLR": SGD + (lambda o: sched.ExponentialLR(o, gamma=0.6), None),
    "PolynomialLR": SGD + (lambda o: sched.PolynomialLR(o, total_iters=4, power=2.0), None),
    "CosineAnnealingLR": SGD + (lambda o: sched.CosineAnnealingLR(o, T_max=4), None),
    "CosineAnnealingWarmRestarts": SGD + (lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=2), None),
    "CyclicLR": SGD + (lambda o: sched.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=2), None),
    "OneCycleLR": SGD + (lambda o: sched.OneCycleLR(o, max_lr=0.1, total_steps=S + 1), None),
    "OneCycleLR_adam": ADAM + (lambda o: sched.OneCycleLR(o, max_lr=0.05, total_steps=S + 1), None),
    "OneCycleLR_adamw": ("AdamW", dict(lr=1e-2, weight_decay=0.05),
                         lambda o: sched.OneCycleLR(o, max_lr=0.05, total_steps=S + 1), None),
    "SequentialLR": SGD + (lambda o: sched.SequentialLR(o, [sched.LinearLR(o, 0.1, total_iters=2),
                                                             sched.ExponentialLR(o, 0.5)], milestones=[2]), None),
    "ChainedScheduler": SGD + (lambda o: sched.ChainedScheduler([sched.ConstantLR(o, 0.5, total_iters=2),
                                                                  sched.ExponentialLR(o, 0.7)]), None),
    "ReduceLROnPlateau": SGD + (lambda o: sched.ReduceLROnPlateau(o, patience=0, factor=0.5), None),
    "hand_sgd": ("SGD", dict(lr=0.1, momentum=0.9), None, _hand_sgd),
    "hand_adam": ADAM + (None, _hand_adam),
    "hand_adamw": ("AdamW", dict(lr=1e-2), None, _hand_adam),
}


def scheduler_classes():
    """Every scheduler class this torch's torch.optim.lr_scheduler defines."""
    base = getattr(sched, "LRScheduler", None) or sched._LRScheduler
    return sorted(n for n, c in vars(sched).items()
                  if inspect.isclass(c) and n[0] != "_" and c.__module__ == sched.__name__ and n != "LRScheduler"
                  and (issubclass(c, base) or n == "ReduceLROnPlateau"))


def run_one(name, rank, world_size, args):
    cls, kwargs, make, hand = CASES[name]
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(60, 10), torch.randint(0, 3, (60,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    ddp = DDP(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3)))
    optimizer = getattr(torch.optim, cls)(ddp.parameters(), **kwargs)
    scheduler = make(optimizer) if make else None
    loss_fn = nn.CrossEntropyLoss()
    trace = DDPTrace(ddp, optimizer, os.path.join(args.out, name), every=args.every, full=args.full) if args.trace else None
    step = 0
    for x, y in loader:
        if hand:
            hand(optimizer, step)
        optimizer.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        optimizer.step()
        if isinstance(scheduler, sched.ReduceLROnPlateau):
            scheduler.step(1.0)  # a validation loss that never improves: the lr halves every step
        elif scheduler:
            scheduler.step()
        step += 1
        if step == args.steps:
            break
    if trace:
        trace.close()
    return {name + "/" + n: p.detach().cpu().clone() for n, p in ddp.module.named_parameters()}


def main(rank, world_size, args):
    final = {}
    for name in [args.scheduler] if args.scheduler else CASES:
        final.update(run_one(name, rank, world_size, args))
    common.save_final_params(final, args)


def options(p):
    p.add_argument("--scheduler", choices=sorted(CASES), help="run this one only")
    p.add_argument("--list", action="store_true", help="print the scheduler classes, then the case names, and exit")


if __name__ == "__main__":
    a = common.parse_args(world_size=3, steps=S, extra=options)
    if a.list:
        print("classes:", " ".join(scheduler_classes()))
        print("cases:", " ".join(CASES))
    else:
        common.launch(main, a)
