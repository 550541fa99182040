"""A learner's MLP on DistributedSampler, SGD with momentum, and one mistake of the kind that leaves DDP's arithmetic
intact but the run broken (issue 50): ddp_check must say what went wrong, at its step and rank, not "as-predicted".

    python3 run_health.py --out RUN_DIR [--mistake M] [--world-size N] [...the common options]

--mistake:
  none            the clean counterpart: no problem finding
  nan_init        a layer whose weight was never initialised (torch.empty, filled here with NaN so that the run
                  is the same on every machine): NaN from step 0
  garbage_init    a layer never initialised whose memory held zeros and huge values (what model.to_empty() leaves:
                  here half its columns 3e38, the rest 0, the same on every machine); its tanh saturates, so nothing
                  becomes NaN, and the layer is dead
  nan_input       rank 1's batch at step 2 holds a NaN (a corrupt sample): it spreads through the all-reduce to
                  every rank's weights
  overflow        from step 1 a hand-written softmax over logits / 0.01 (a temperature): exp of a logit past 88.7
                  is inf in float32, inf / inf is NaN, from finite inputs and weights
  nan_skipped     nan_input, but every rank skips the step whose gradients are not finite (zero_grad, next batch),
                  as torch.amp.GradScaler does: the clean counterpart, a note (the parameters stay finite)
  unfreeze        the first layer frozen before DDP(), unfrozen at step 2 (the optimizer holds it from the
                  start): DDP never reduces it, so each rank trains it on its own gradient
  frozen          the clean counterpart of unfreeze: the first layer frozen before DDP() and never unfrozen
  added_after     a layer appended to the model after DDP(...) (torch 2.x, whose DDP keeps the parameters it wrapped):
                  the optimizer over ddp_model.parameters() steps it, DDP never reduces it
  no_zero_grad    optimizer.zero_grad() never called: each .grad is the running sum of every step's average
  module_call     ddp_model.module(x) on every rank, every step: no forward through DDP, no all-reduce
  second_backward a second backward of the same loss (retain_graph=True) in every step
"""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace

MISTAKE_STEP, MISTAKE_RANK = 2, 1


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 10), torch.randint(0, 3, (96,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 3))
    if args.mistake == "nan_init":
        model[2].weight = nn.Parameter(torch.empty(64, 64).fill_(float("nan")))  # torch.empty, never initialised
    if args.mistake == "garbage_init":
        w = torch.zeros(64, 64)
        w[:, :32] = 3e38
        model[2].weight = nn.Parameter(w)
    if args.mistake in ("unfreeze", "frozen"):
        model[0].requires_grad_(False)  # frozen before DDP(): DDP's reducer leaves it out for good
    ddp = DDP(model)
    if args.mistake == "added_after":
        model.append(nn.Linear(3, 3))  # "one more head", after the wrap
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step, batch = 0, 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            if args.mistake == "unfreeze" and step == MISTAKE_STEP:
                model[0].requires_grad_(True)  # "fine-tune the whole model from here"
            batch += 1
            if args.mistake in ("nan_input", "nan_skipped") and batch == MISTAKE_STEP + 1 and rank == MISTAKE_RANK:
                x = x.clone()
                x[0, 3] = float("nan")
            if args.mistake != "no_zero_grad":
                optimizer.zero_grad()
            out = (ddp.module if args.mistake == "module_call" else ddp)(x)
            loss = loss_fn(out, y)
            if args.mistake == "overflow" and step >= 1:
                e = (out / 0.01).exp()  # instead of log_softmax, which subtracts the largest logit first
                loss = -(e / e.sum(1, keepdim=True))[torch.arange(len(y)), y].log().mean()
            if args.mistake == "second_backward":
                loss.backward(retain_graph=True)
            loss.backward()
            if args.mistake == "nan_skipped" and not all(p.grad.isfinite().all() for p in ddp.parameters()):
                optimizer.zero_grad()  # DDP averaged the NaN into every rank's gradient: every rank skips alike
                continue
            optimizer.step()
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    common.save_final(ddp, args)


def options(p):
    p.add_argument("--mistake", default="none",
                   choices=["none", "nan_init", "garbage_init", "nan_input", "nan_skipped", "overflow", "unfreeze", "frozen", "added_after", "no_zero_grad",
                            "module_call", "second_backward"])


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=5, extra=options))
