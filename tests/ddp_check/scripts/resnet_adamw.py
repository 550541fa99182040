"""Clean run: a residual model (x + f(x) skip connections, width 256), AdamW, 3 ranks, 2 buckets."""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))

    def forward(self, x):
        return x + self.f(x)


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(6, 256)
        self.blocks = nn.Sequential(Block(256), Block(256))
        self.head = nn.Linear(256, 2)

    def forward(self, x):
        return self.head(torch.relu(self.blocks(self.stem(x))))


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(36, 6), torch.randn(36, 2))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    ddp = DDP(ResNet())
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=3e-3, weight_decay=0.05)

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(ddp(x), y)
            loss.backward()
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
