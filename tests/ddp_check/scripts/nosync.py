"""Clean run: gradient accumulation over 2 micro-batches, the first under ddp.no_sync(); 3 ranks, 2 buckets."""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace

ACCUMULATE = 2


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 5), torch.randint(0, 2, (64,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    ddp = DDP(nn.Sequential(nn.Linear(5, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 2)))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            if (i + 1) % ACCUMULATE != 0:
                with ddp.no_sync():
                    (loss_fn(ddp(x), y) / ACCUMULATE).backward()
                continue
            (loss_fn(ddp(x), y) / ACCUMULATE).backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    common.save_final(ddp, args)


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=4))
