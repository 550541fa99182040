"""Data parallelism written by hand, as courses teach it (no DistributedDataParallel): an MLP 10-24-16-3, SGD, a
DistributedSampler, gradients synchronised by the script itself, traced with the same three lines as a DDP run.

--style (how the gradients are averaged):
  tutorial   PyTorch's "Writing Distributed Applications": all_reduce(p.grad, SUM) per parameter, then /= world_size
  multiply   the same, then mul_(1 / world_size)
  predivide  p.grad /= world_size first, then all_reduce SUM
  avg        all_reduce(p.grad, ReduceOp.AVG) (torch 2.x; torch 1.13's Gloo raises)
  flat       every gradient in one flat buffer (torch.cat), one all_reduce, / world_size, copied back
  buckets    flat buffers of at most --bucket-numel elements each, in reverse parameter order, all-reduced async
  hooks      (torch 2.x) CS336's: register_post_accumulate_grad_hook issues an async all_reduce of p.grad per
             parameter during the backward; finish_gradient_synchronization() waits, then divides
  hook_buckets (torch 2.x) CS336's bucketed one: each hook counts its bucket's ready gradients and, at the last,
             flattens the bucket and starts its async all_reduce; the finish waits, divides, copies back, and
             resets the counts
--mistake (one classic mistake; "none" for the clean run):
  no_divide      SUM never divided
  divide_twice   divided by world_size twice
  hardcoded_ws   divided by 2 whatever the world size
  skip_bias      the biases never synchronised
  no_broadcast   each rank initialised from its own seed, and no broadcast of rank 0's weights at the start
  double_grad    a tensor hook that sets p.grad = grad.clone() before accumulation (every gradient doubled)
  hook_param     (hooks) the post-accumulate hook all-reduces the parameter it is handed, not its .grad
  no_wait        (hooks) the async all-reduces are not waited before optimizer.step()
  no_reset       (hook_buckets) the buckets' ready counts are never reset: no bucket fires after step 0
  on_ddp         the model wrapped in DistributedDataParallel too, and the script's own average run on top of DDP's
  last_micro     (flat, buckets; with --accumulate) the buffer is filled from each backward's gradient as a tensor
                 hook saw it, so only the last micro-batch's gradient is averaged
  no_sampler     no DistributedSampler: every rank trains on the same batches
  no_shard_broadcast  (--shard byhand) the sharded step is never broadcast: each rank keeps only its own share
--style ddp: no sync by hand: torch's DistributedDataParallel (for --shard with DDP).
--shard (ZeRO-1: each rank's optimizer steps its share of the parameters, then each is broadcast from its owner):
  none      one optimizer on every rank, stepping every parameter
  byhand    CS336's ShardedOptimizer: a torch.optim.Optimizer subclass over every parameter, holding a local
            optimizer of the parameters it owns (round robin); step() steps it, then broadcasts each parameter
  plain     the same as a plain class (no torch.optim base): .opt, .step(), .zero_grad()
  torch     torch.distributed.optim.ZeroRedundancyOptimizer
--optimizer sgd (momentum 0.9) | adam.
--accumulate K: K micro-batches per step, synchronised once after the last.
--batchnorm: a BatchNorm1d after the first layer (its running statistics are buffers: each rank's own unless
  --broadcast-buffers, which broadcasts rank 0's before every forward, as DDP does by default).
--oracle FILE (with --no-trace): torch's own DDP on a copy of the model, fed the step-0 batch: how many values of
  the gradient the hand-written sync stepped with are DDP's bits (rank 0 writes {"values": N, "exact": E}, every
  rank's counted), which ddp_check's "vs_ddp" must reproduce from the trace alone.
"""
import copy
import json

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def options(p):
    p.add_argument("--style", default="tutorial",
                   choices=["tutorial", "multiply", "predivide", "avg", "flat", "buckets", "hooks", "hook_buckets",
                            "ddp"])
    p.add_argument("--mistake", default="none",
                   choices=["none", "no_divide", "divide_twice", "hardcoded_ws", "skip_bias", "no_broadcast",
                            "double_grad", "hook_param", "no_wait", "no_reset", "on_ddp", "no_shard_broadcast", "last_micro", "no_sampler"])
    p.add_argument("--shard", default="none", choices=["none", "byhand", "plain", "torch"])
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--bucket-numel", type=int, default=300)
    p.add_argument("--batchnorm", action="store_true")
    p.add_argument("--broadcast-buffers", action="store_true")
    p.add_argument("--oracle", help="write DDP's agreement with the hand-written sync at step 0 here (JSON)")


class HandDDP(nn.Module):
    """The learner's wrapper: broadcast at construction, a sync after backward (or hooks during it)."""

    def __init__(self, module, args, world_size):
        super().__init__()
        self.module = module
        self.args, self.world_size = args, world_size
        self.handles = []
        if args.mistake != "no_broadcast":
            for p in module.parameters():
                dist.broadcast(p.data, src=0)
        if args.style == "hooks":
            for p in module.parameters():
                p.register_post_accumulate_grad_hook(self._hook)
        if args.style == "hook_buckets":  # reverse order, as gradients become ready; at most --bucket-numel each
            self.buckets, self.bucket_of, cur = [], {}, []
            for p in reversed(list(module.parameters())):
                cur.append(p)
                if sum(q.numel() for q in cur) >= args.bucket_numel:
                    self.buckets.append(cur)
                    cur = []
            if cur:
                self.buckets.append(cur)
            for b, ps in enumerate(self.buckets):
                for p in ps:
                    self.bucket_of[p] = b
                    p.register_post_accumulate_grad_hook(self._bucket_hook)
            self.ready = [0] * len(self.buckets)
        if args.mistake == "last_micro":  # the gradient of each backward, kept by a hook: the last one wins
            self.last = {}
            for p in module.parameters():
                p.register_hook(self._keeping_hook(p))
        if args.mistake == "double_grad":
            for p in module.parameters():
                p.register_hook(self._doubling_hook(p))

    def forward(self, x):
        if self.args.broadcast_buffers:
            for b in self.module.buffers():
                dist.broadcast(b, src=0)
        return self.module(x)

    def _keeping_hook(self, p):
        def hook(grad):
            self.last[p] = grad
        return hook

    def _doubling_hook(self, p):
        def hook(grad):
            p.grad = grad.clone()  # AccumulateGrad then adds grad into this .grad: 2 * grad
            return grad
        return hook

    def _hook(self, p):
        t = p if self.args.mistake == "hook_param" else p.grad
        self.handles.append((dist.all_reduce(t, async_op=True), p))

    def _bucket_hook(self, p):
        b = self.bucket_of[p]
        self.ready[b] += 1
        if self.ready[b] == len(self.buckets[b]):
            flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[b]])
            self.handles.append((dist.all_reduce(flat, async_op=True), (flat, b)))

    def _divisor(self):
        m = self.args.mistake
        return 1 if m == "no_divide" else 2 if m == "hardcoded_ws" else self.world_size

    def _synced(self):
        return [(n, p) for n, p in self.module.named_parameters()
                if p.grad is not None and not (self.args.mistake == "skip_bias" and n.endswith("bias"))]

    def sync(self):
        style, d = self.args.style, self._divisor()
        params = [p for _, p in self._synced()]
        if style == "hook_buckets":
            for work, (flat, b) in self.handles:
                work.wait()
                flat /= d
                off = 0
                for p in self.buckets[b]:
                    p.grad.copy_(flat[off:off + p.numel()].view_as(p.grad))
                    off += p.numel()
            self.handles = []
            if self.args.mistake != "no_reset":
                self.ready = [0] * len(self.buckets)
        elif style == "hooks":
            if self.args.mistake != "no_wait":
                for work, _ in self.handles:
                    work.wait()
            for _, p in self.handles:
                p.grad /= d
            self.handles = []
        elif style == "ddp":
            pass  # DistributedDataParallel averaged them in the backward
        elif style in ("tutorial", "multiply", "predivide", "avg"):
            for p in params:
                if style == "predivide":
                    p.grad /= d
                op = dist.ReduceOp.AVG if style == "avg" else dist.ReduceOp.SUM
                dist.all_reduce(p.grad, op=op)
                if style == "tutorial":
                    p.grad /= d
                elif style == "multiply":
                    p.grad.mul_(1.0 / d)
        else:  # flat, buckets
            cap = sum(p.numel() for p in params) if style == "flat" else self.args.bucket_numel
            order = params if style == "flat" else list(reversed(params))
            buckets, cur = [], []
            for p in order:
                cur.append(p)
                if sum(q.numel() for q in cur) >= cap:
                    buckets.append(cur)
                    cur = []
            if cur:
                buckets.append(cur)
            works = []
            for b in buckets:
                src = [self.last[p] if self.args.mistake == "last_micro" else p.grad for p in b]
                flat = torch.cat([g.reshape(-1) for g in src])
                works.append((dist.all_reduce(flat, async_op=style == "buckets"), flat, b))
            for work, flat, b in works:
                if work is not None:
                    work.wait()
                flat /= d
                off = 0
                for p in b:
                    p.grad.copy_(flat[off:off + p.numel()].view_as(p.grad))
                    off += p.numel()
        if self.args.mistake == "divide_twice":
            for p in params:
                p.grad /= self.world_size


def _owners(params, world_size):
    return [(p, i % world_size) for i, p in enumerate(params)]  # round robin, in the order the groups list them


class ShardedOptimizer(torch.optim.Optimizer):
    """CS336's ZeRO-1: the groups hold every parameter; a local optimizer of optimizer_cls steps this rank's share,
    then each parameter is broadcast from the rank that owns it."""

    def __init__(self, params, optimizer_cls, broadcast=True, **kwargs):
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.cls, self.kwargs, self.broadcast = optimizer_cls, kwargs, broadcast
        self.owner, self.local = [], None
        super().__init__(params, kwargs)

    def add_param_group(self, group):
        super().add_param_group(group)
        owned = _owners(group["params"], self.world_size)
        self.owner += owned
        mine = dict(self.param_groups[-1], params=[p for p, r in owned if r == self.rank])
        if self.local is None:
            self.local = self.cls([mine], **self.kwargs)
        else:
            self.local.add_param_group(mine)

    def step(self, closure=None):
        loss = self.local.step(closure)
        if self.broadcast:
            for p, owner in self.owner:
                dist.broadcast(p.data, src=owner)
        return loss


class PlainSharded:
    """The same ZeRO-1 as a plain class."""

    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = list(params)
        self.owner = _owners(self.params, dist.get_world_size())
        self.opt = optimizer_cls([p for p, r in self.owner if r == dist.get_rank()], **kwargs)

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        self.opt.step()
        for p, owner in self.owner:
            dist.broadcast(p.data, src=owner)


def make_optimizer(params, args):
    cls, kw = (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}) if args.optimizer == "sgd" else (torch.optim.Adam, {"lr": 0.01})
    if args.shard == "byhand":
        return ShardedOptimizer(params, cls, broadcast=args.mistake != "no_shard_broadcast", **kw)
    if args.shard == "plain":
        return PlainSharded(params, cls, **kw)
    if args.shard == "torch":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kw)
    return cls(params, **kw)


def oracle(ddp, model, loss_fn, x, y, args):
    """DDP's gradient of the same batch from the same weights, against the hand-written sync's, value by value."""
    loss_fn(ddp(x), y).backward()
    exact = values = 0
    for p, q in zip(model.parameters(), ddp.module.parameters()):
        exact += int((p.grad == q.grad).sum())
        values += p.grad.numel()
    counts = [None] * dist.get_world_size()
    dist.all_gather_object(counts, (values, exact))
    if dist.get_rank() == 0:
        with open(args.oracle, "w") as f:
            json.dump({"values": sum(c[0] for c in counts), "exact": sum(c[1] for c in counts)}, f)


def main(rank, world_size, args):
    torch.manual_seed(rank if args.mistake == "no_broadcast" else 0)
    layers = [nn.Linear(10, 24)] + ([nn.BatchNorm1d(24)] if args.batchnorm else [])
    model = nn.Sequential(*layers, nn.ReLU(), nn.Linear(24, 16), nn.Tanh(), nn.Linear(16, 3))
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 10), torch.randint(0, 3, (96,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=8, sampler=None if args.mistake == "no_sampler" else sampler)
    hand = HandDDP(model, args, world_size)
    ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(model)) if args.oracle else None
    on_ddp = args.mistake == "on_ddp" or args.style == "ddp"
    net = torch.nn.parallel.DistributedDataParallel(model) if on_ddp else hand
    optimizer = make_optimizer(hand.parameters(), args)
    loss_fn = nn.CrossEntropyLoss()

    trace = DDPTrace(net, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step, micro = 0, 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            if micro == 0:
                optimizer.zero_grad()
            loss = loss_fn(net(x), y) / args.accumulate
            loss.backward()
            micro += 1
            if micro < args.accumulate:
                continue
            micro = 0
            hand.sync()
            if ddp is not None and step == 0:
                oracle(ddp, model, loss_fn, x, y, args)
            optimizer.step()
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    if args.final:
        common.save_final_params({n: p.detach().clone() for n, p in model.named_parameters()}, args)


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=4, extra=options))
