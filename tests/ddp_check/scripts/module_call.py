"""Mistake: at step 2 rank 1 calls the wrapped module, ddp_model.module(x), instead of ddp_model(x) (say, a helper
that "unwraps" the model for one batch). Its backward runs no all-reduce, so rank 1 steps on its local gradients
while ranks 0 and 2 all-reduce among themselves... with rank 1's next backward: from there every all-reduce pairs
step s of ranks 0 and 2 with step s+1 of rank 1. 3 ranks, 2 buckets.

How it ends (measured, torch 1.13 and 2.x): rank 1 finishes its 5 steps and its trace, then waits in the final
barrier; ranks 0 and 2 wait in their step-4 backward for an all-reduce rank 1 never starts, until DDP's process group
times out (RuntimeError "Timed out waiting 10000ms for recv operation to complete" on 1.13, "Application timeout
caused pair closure" on 2.x), and mp.spawn ends every rank: exit status 1. Their traces stop after step 3
("complete": false); rank 1's is complete."""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace

MISTAKE_STEP, MISTAKE_RANK = 2, 1


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(60, 10), torch.randint(0, 3, (60,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    # DDP's collectives in a group that gives up after 10 s (torch's default: 30 minutes), so that the run ends as
    # it would, only sooner.
    group = dist.new_group(timeout=datetime.timedelta(seconds=10))
    ddp = DDP(nn.Sequential(nn.Linear(10, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 3)),
              process_group=group)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            model = ddp.module if (step == MISTAKE_STEP and rank == MISTAKE_RANK) else ddp  # the mistake
            loss_fn(model(x), y).backward()
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
    common.launch(main, common.parse_args(world_size=3, steps=5))
