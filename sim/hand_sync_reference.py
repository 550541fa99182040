"""ddp_reference.py --hand-sync: the gradients averaged by the training script itself, no DistributedDataParallel,
as courses write it, the oracle for `ddp_sim --hand-sync`.

--hand-sync per-parameter: dist.all_reduce(p.grad) for each parameter (PyTorch's "Writing Distributed
  Applications"); flat: every gradient in one torch.cat buffer, model order, one all_reduce, copied back;
  buckets: buffers in reverse model order, each closed once it reaches --bucket-cap-mb (DDP's rule), each one
  all_reduce.
--average: predivide: grad * (1 / world_size) before the SUM (DDP's arithmetic); postdivide: SUM then
  / world_size; multiply: SUM then * (1 / world_size); divide-first: grad / world_size then SUM.

Rank 0's weights are broadcast at the start, its buffers before every training forward (as DDP does); the sync
runs before each optimizer step (the step's last micro-batch: no_sync() skips the others, as DDP's does).
Besides the run, `step0` in the dump: from the initial weights and each rank's first batch, the hand-written
average against torch DDP's own (a DistributedDataParallel on a copy): rank 0's {"values": N, "ddp_exact": E}.
"""
import contextlib
import copy

import torch
import torch.distributed as dist
import torch.nn as nn

LAYOUTS = ['none', 'per-parameter', 'flat', 'buckets']
AVERAGES = ['predivide', 'postdivide', 'multiply', 'divide-first']


def add_flags(add):
    add('--hand-sync', choices=LAYOUTS, default='none')
    add('--average', choices=AVERAGES, default='predivide')


class HandSynced(nn.Module):
    """The learner's wrapper: what the script writes in place of DistributedDataParallel(model)."""

    def __init__(self, module, a, broadcast=True):
        super().__init__()
        self.module, self.a = module, a
        self.ws = dist.get_world_size()
        if broadcast:
            for p in module.parameters():
                dist.broadcast(p.data, src=0)
            for b in module.buffers():
                dist.broadcast(b, src=0)

    def forward(self, x):
        if self.training and self.a.broadcast_buffers:
            for b in self.module.buffers():
                dist.broadcast(b, src=0)
        return self.module(x)

    @contextlib.contextmanager
    def no_sync(self):  # the sync runs at the step, after the step's last micro-batch only
        yield

    def _layout(self):
        params = [p for p in self.module.parameters() if p.grad is not None]
        if self.a.hand_sync == 'per-parameter':
            return [[p] for p in params]
        if self.a.hand_sync == 'flat':
            return [params]
        cap, out, cur, size = int(self.a.bucket_cap_mb * 1024 * 1024), [], [], 0
        for p in reversed(params):
            cur.append(p)
            size += p.numel() * 4
            if size >= cap:
                out.append(cur)
                cur, size = [], 0
        return out + ([cur] if cur else [])

    def sync(self):
        avg, ws = self.a.average, self.ws
        for ps in self._layout():
            flat = ps[0].grad if len(ps) == 1 else torch.cat([p.grad.reshape(-1) for p in ps])
            if avg == 'predivide':
                flat.mul_(1.0 / ws)
            elif avg == 'divide-first':
                flat.div_(ws)
            dist.all_reduce(flat)
            if avg == 'postdivide':
                flat.div_(ws)
            elif avg == 'multiply':
                flat.mul_(1.0 / ws)
            if len(ps) > 1:
                off = 0
                for p in ps:
                    p.grad.copy_(flat[off:off + p.numel()].view_as(p.grad))
                    off += p.numel()


class SyncThenStep:
    """The optimizer as the training loop calls it: the script's sync, then the step."""

    def __init__(self, hand, opt):
        self.hand, self.opt = hand, opt

    def step(self):
        self.hand.sync()
        self.opt.step()

    def zero_grad(self, set_to_none=True):
        self.opt.zero_grad(set_to_none=set_to_none)


def step0(a, model0, batch, loss_fn):
    """From the initial weights and this rank's first batch: the hand-written average against torch DDP's."""
    x, t = batch
    ddp = nn.parallel.DistributedDataParallel(copy.deepcopy(model0))
    loss_fn(ddp(x), t).backward()
    hand = HandSynced(copy.deepcopy(model0), a, broadcast=False)
    loss_fn(hand(x), t).backward()
    hand.sync()
    values = exact = 0
    for p, q in zip(hand.module.parameters(), ddp.module.parameters()):
        exact += int((p.grad == q.grad).sum())
        values += p.grad.numel()
    return {'values': values, 'ddp_exact': exact}
