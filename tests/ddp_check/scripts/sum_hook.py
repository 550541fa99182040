"""Mistake: a custom communication hook that all-reduces with SUM and forgets to divide by the world size:
the gradients agree on every rank, but are world_size times DDP's average."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def sum_allreduce_hook(state, bucket):
    work = dist.all_reduce(bucket.buffer(), async_op=True)  # the mistake: no division by world_size
    return work.get_future().then(lambda fut: fut.value()[0])


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(36, 6), torch.randint(0, 3, (36,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    ddp = DDP(nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3)))
    ddp.register_comm_hook(None, sum_allreduce_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
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
    common.save_final(ddp, args)


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=3))
