"""Clean run: a dataset whose samples repeat (each of 20 distinct samples three times, as an oversampled or
augmented-by-copy dataset would), sharded correctly by DistributedSampler with set_epoch over 2 epochs, 3 ranks:
every rank sees 20 sample indices per epoch, its own, in a new order each epoch. Equal samples at different indices
are not an overlap: expected exit 0, no overlapping-data. 2 buckets."""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def main(rank, world_size, args):
    torch.manual_seed(0)
    x, y = torch.randn(20, 6), torch.randint(0, 3, (20,))
    data = TensorDataset(x.repeat(3, 1), y.repeat(3))  # 60 samples, 20 distinct
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=5, sampler=sampler)

    ddp = DDP(nn.Sequential(nn.Linear(6, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 3)))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            optimizer.zero_grad()
            loss_fn(ddp(xb), yb).backward()
            optimizer.step()
    if trace:
        trace.close()
    common.save_final(ddp, args)


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3))
