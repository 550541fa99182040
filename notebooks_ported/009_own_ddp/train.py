"""Lab 009's training script: notebook 000's averaging (its 6-4-2 MLP, MSELoss, SGD lr 0.01, RandomTensorDataset of
seed 12345) on real ranks, with the data parallelism written by hand in one of four versions, with one classic
mistake or none, traced by ddplab_trace.DDPTrace (the three lines marked "ddplab").

    /usr/bin/python3 notebooks_ported/009_own_ddp/train.py --version tutorial|flat|hooks|buckets
        [--mistake] [--world-size 3] (--out RUN_DIR | --no-trace [--oracle FILE])

--version (how the replicas' gradients are averaged):
  tutorial  PyTorch's "Writing Distributed Applications": all_reduce(p.grad, SUM) per parameter, then / world_size
            (mistake: the SUM never divided)
  flat      every gradient in one flat buffer, one all_reduce, / world_size, copied back (mistake: / 2, notebook
            000's two replicas written into the code)
  hooks     a hook on each parameter's gradient accumulator starts an async all_reduce of p.grad during the backward;
            finish() waits, then divides (mistake: the handles not waited before optimizer.step())
  buckets   the same hooks count each bucket's ready gradients and, at the last, flatten the bucket and start its
            async all_reduce; finish() waits, divides, copies back and resets the counts (mistake: never reset)
--oracle FILE (untraced): at every step, torch's own DistributedDataParallel on a copy of the model, given the
  same weights and batch: how many values of the gradient the hand-written sync stepped with are DDP's bits, every
  rank and step together ({"values": N, "exact": E}, written by rank 0).
"""
import argparse
import copy
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "verify"))
from ddplab_trace import DDPTrace  # noqa: E402  ddplab

BUCKET_NUMEL = 12  # notebook 000's MLP has 38 gradient values: two buckets (10 + 4, then 24)


class RandomTensorDataset(Dataset):  # notebook 000's
    def __init__(self, num_samples, in_shape, out_shape):
        self.num_samples = num_samples
        torch.manual_seed(12345)
        self.data = [(torch.randn(in_shape), torch.randn(out_shape)) for _ in range(num_samples)]

    def __len__(self):
        return self.num_samples

    def __getitem__(self, idx):
        return self.data[idx]


class MLP(nn.Module):  # notebook 000's
    def __init__(self, in_feature, hidden_units, out_feature):
        super().__init__()
        torch.manual_seed(12345)
        self.hidden_layer = nn.Linear(in_feature, hidden_units)
        self.output_layer = nn.Linear(hidden_units, out_feature)

    def forward(self, x):
        return self.output_layer(self.hidden_layer(x))


class MyDDP(nn.Module):
    """The learner's data parallelism: rank 0's weights broadcast at construction, then one of four syncs."""

    def __init__(self, module, version, mistake):
        super().__init__()
        self.module, self.version, self.mistake = module, version, mistake
        self.world_size = dist.get_world_size()
        for p in module.parameters():
            dist.broadcast(p.data, src=0)
        self.handles = []
        params = list(module.parameters())
        if version == "buckets":  # reverse order, as the backward makes the gradients ready
            self.buckets, cur = [], []
            for p in reversed(params):
                cur.append(p)
                if sum(q.numel() for q in cur) >= BUCKET_NUMEL:
                    self.buckets.append(cur)
                    cur = []
            if cur:
                self.buckets.append(cur)
            self.bucket_of = {p: b for b, ps in enumerate(self.buckets) for p in ps}
            self.ready = [0] * len(self.buckets)
        if version in ("hooks", "buckets"):
            # The gradient accumulator's hook runs after .grad is accumulated (torch 1.13 and 2.x alike; torch 2.x
            # also has p.register_post_accumulate_grad_hook). The accumulators are kept alive with the hooks.
            self.accumulators = []
            for p in params:
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                acc.register_hook(self._hook(p))
                self.accumulators.append(acc)

    def forward(self, x):
        return self.module(x)

    def _hook(self, p):
        def hook(*_):
            if self.version == "hooks":
                self.handles.append((dist.all_reduce(p.grad, async_op=True), [p], None))
                return
            b = self.bucket_of[p]
            self.ready[b] += 1
            if self.ready[b] == len(self.buckets[b]):
                flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[b]])
                self.handles.append((dist.all_reduce(flat, async_op=True), self.buckets[b], flat))
        return hook

    def finish(self):
        """After loss.backward(), before optimizer.step(): every gradient averaged over the ranks."""
        ws = self.world_size
        params = list(self.module.parameters())
        if self.version == "tutorial":
            for p in params:
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
                if self.mistake != "on":
                    p.grad /= ws
        elif self.version == "flat":
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat)
            flat /= 2 if self.mistake == "on" else ws
            _copy_back(flat, params)
        else:
            for work, ps, flat in self.handles:
                if not (self.version == "hooks" and self.mistake == "on"):
                    work.wait()
                if flat is None:
                    ps[0].grad /= ws
                else:
                    flat /= ws
                    _copy_back(flat, ps)
            self.handles = []
            if self.version == "buckets" and self.mistake != "on":
                self.ready = [0] * len(self.buckets)


def _copy_back(flat, params):
    off = 0
    for p in params:
        p.grad.copy_(flat[off:off + p.numel()].view_as(p.grad))
        off += p.numel()


def train(rank, world_size, args):
    dataset = RandomTensorDataset(num_samples=192, in_shape=6, out_shape=2)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    loader = DataLoader(dataset, batch_size=16, sampler=sampler)
    model = MLP(in_feature=6, hidden_units=4, out_feature=2)
    ddp = nn.parallel.DistributedDataParallel(copy.deepcopy(model)) if args.oracle else None
    net = MyDDP(model, args.version, "on" if args.mistake else "")
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()
    trace = DDPTrace(net, optimizer, args.out) if args.out else None  # ddplab
    values = exact = 0
    for x, y in loader:
        if ddp is not None:  # DDP from the same weights, on the same batch
            with torch.no_grad():
                for p, q in zip(model.parameters(), ddp.module.parameters()):
                    q.copy_(p)
            ddp.zero_grad(set_to_none=True)
            loss_fn(ddp(x), y).backward()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()
        net.finish()
        if ddp is not None:
            for p, q in zip(model.parameters(), ddp.module.parameters()):
                exact += int((p.grad == q.grad).sum())
                values += p.grad.numel()
        optimizer.step()
    if trace:
        trace.close()  # ddplab
    if args.oracle:
        counts = [None] * world_size
        dist.all_gather_object(counts, (values, exact))
        if rank == 0:
            with open(args.oracle, "w") as f:
                json.dump({"values": sum(c[0] for c in counts), "exact": sum(c[1] for c in counts)}, f)


def worker(rank, args, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
    try:
        train(rank, args.world_size, args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--version", choices=["tutorial", "flat", "hooks", "buckets"], required=True)
    p.add_argument("--mistake", action="store_true", help="the version's classic mistake")
    p.add_argument("--world-size", type=int, default=3)
    p.add_argument("--out", help="the trace's RUN_DIR")
    p.add_argument("--no-trace", action="store_true")
    p.add_argument("--oracle", help="(untraced) torch DDP's agreement with the sync, as JSON")
    args = p.parse_args()
    if args.no_trace:
        args.out = None
    elif not args.out:
        p.error("--out RUN_DIR is needed unless --no-trace")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.world_size, join=True)
