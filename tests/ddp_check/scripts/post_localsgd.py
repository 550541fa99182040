"""Clean run (by torch's design): post-local SGD. DDP's gradients are all-reduced over all ranks for the first 2
iterations (PostLocalSGDState's start_localSGD_iter), then only within each rank's subgroup of size 1 (so not at
all); torch's PeriodicModelAverager(period=2, warmup_steps=2) averages the parameters over all ranks after
optimizer steps 2, 4, ... 3 ranks, 2 buckets.

The replicas differ between averagings by design, and are equal right after each.

Subgroups of size 1: torch 2.x makes them with dist.new_subgroups(group_size=1); torch 1.13 refuses that on CPU
(measured: ValueError "Subgroups can only be created when CUDA is available"), so there one dist.new_group per rank."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_localSGD
from torch.distributed.algorithms.model_averaging import averagers
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def subgroup_of_one(rank, world_size):
    try:
        subgroup, _ = dist.new_subgroups(group_size=1)
    except ValueError:  # torch 1.13 without CUDA
        groups = [dist.new_group([r]) for r in range(world_size)]  # every rank creates every group
        subgroup = groups[rank]
    return subgroup


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 8), torch.randint(0, 4, (48,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    ddp = DDP(nn.Sequential(nn.Linear(8, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 4)))
    state = post_localSGD.PostLocalSGDState(process_group=None, subgroup=subgroup_of_one(rank, world_size),
                                            start_localSGD_iter=2)
    ddp.register_comm_hook(state, post_localSGD.post_localSGD_hook)
    averager = averagers.PeriodicModelAverager(period=2, warmup_steps=2)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(ddp(x), y).backward()
            optimizer.step()
            averager.average_parameters(ddp.parameters())
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    common.save_final(ddp, args)


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=6))
