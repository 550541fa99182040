"""A long clean run recorded whole, then in the whole-run mode (digests only after the recorder's first steps),
with one bit flipped on purpose: the silent data corruption a learner cannot find by hand. An MLP, SGD with
momentum, DistributedSampler, 3 ranks, one step per batch over as many epochs as --steps needs.

  --flip-grad STEP:RANK[:high]  after backward and before optimizer.step() (after the clip, with --clip), the
                            lowest mantissa bit (high: the highest) of one element of '2.weight'.grad flipped on
                            RANK (all: on every rank, the same element)
  --clip MAX_NORM           clip_grad_norm_(ddp.parameters(), MAX_NORM) at every step
  --flip-param STEP:RANK    after optimizer.step(), the same bit of one element of '2.weight' itself
  --flip-state STEP:RANK    after optimizer.step(), the same bit of one element of its momentum buffer
  --nan-input STEP:RANK     a NaN in the batch of RANK at STEP (the run goes on, on NaN)
  --flip-in-step STEP:RANK  inside optimizer.step(), after torch's arithmetic, the same bit of an element of
                            '2.weight' that the recorder's sample holds at STEP (a value corrupted inside the step)
  --flip-local STEP:RANK[:low]  in backward, after the recorder saw it and before DDP's bucket took it, the
                            highest mantissa bit (low: the lowest) of the largest element of '2.weight''s local
                            gradient that the sample does not hold at STEP: a contribution to the all-reduce that
                            is not the gradient backward computed (a gradient hook registered after DDPTrace)
"""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace
from ddplab_trace.sample import _plan


class SGD(torch.optim.SGD):
    """torch's SGD, and at one step a bit flipped inside step() (named SGD: ddp_check models torch's SGD)."""

    def __init__(self, params, flip_at, **kw):
        super().__init__(params, **kw)
        self.flip_at, self.steps = flip_at, 0

    def step(self, closure=None):
        out = super().step(closure)
        if self.flip_at is not None and self.steps == self.flip_at[0]:
            with torch.no_grad():
                self.flip_at[1].view(-1).view(torch.int32)[self.flip_at[2]] ^= 1
        self.steps += 1
        return out


def sampled_element(model, step):
    """An element of '2.weight' in the recorder's sample at `step` (sample.py's plan)."""
    params = list(model.parameters())
    slots, elems = _plan(step, [p.numel() for p in params])[2]  # parameter 2: '2.weight'
    return elems[0]


def flip_local_hook(model, spec, rank, steps):
    """A hook on '2.weight' registered after DDPTrace's: it runs after the recorder saw the local gradient."""
    at, who, *low = spec.split(":")
    if who not in ("all", str(rank)):
        return
    weight = model[2].weight
    params = list(model.parameters())

    def hook(grad):
        if steps[0] != int(at):
            return grad
        sampled = set(_plan(int(at), [p.numel() for p in params]).get(2, ([], []))[1])
        mag = grad.detach().abs().reshape(-1).clone()
        mag[list(sampled)] = -1.0
        g = grad.detach().clone()
        g.view(-1).view(torch.int32)[int(mag.argmax())] ^= 1 if low else 1 << 22
        return g

    weight.register_hook(hook)


def flip(t, high=False):  # the lowest mantissa bit of element [3, 5]: a value wrong in its last place
    with torch.no_grad():
        v = t.view(torch.int32)
        v[3, 5] ^= (1 << 22) if high else 1


def when(spec, step, rank):
    if not spec:
        return False
    at, who = spec.split(":")[:2]
    return int(at) == step and (who == "all" or int(who) == rank)


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(240, 16), torch.randn(240, 4))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))
    ddp = DDP(model)
    flip_at = None
    if args.flip_in_step and (args.flip_in_step.split(":")[1] in ("all", str(rank))):
        at = int(args.flip_in_step.split(":")[0])
        flip_at = (at, model[2].weight, sampled_element(model, at))
    optimizer = SGD(ddp.parameters(), flip_at, lr=0.05, momentum=0.9)
    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    steps = [0]
    if args.flip_local:
        flip_local_hook(model, args.flip_local, rank, steps)
    step = 0
    for epoch in range(10_000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            if when(args.nan_input, step, rank):
                x = x.clone()
                x[0, 0] = float("nan")
            optimizer.zero_grad()
            nn.functional.mse_loss(ddp(x), y).backward()
            if args.clip:
                torch.nn.utils.clip_grad_norm_(ddp.parameters(), float(args.clip))
            if when(args.flip_grad, step, rank):
                flip(model[2].weight.grad, args.flip_grad.endswith(":high"))
            optimizer.step()
            if when(args.flip_param, step, rank):
                flip(model[2].weight)
            if when(args.flip_state, step, rank):
                flip(optimizer.state[model[2].weight]["momentum_buffer"])
            step += 1
            steps[0] = step
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    common.save_final(ddp, args)


def extra(p):
    for f in ("--flip-grad", "--flip-param", "--flip-state", "--nan-input", "--flip-in-step", "--flip-local", "--clip"):
        p.add_argument(f, default="")


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=200, extra=extra))
