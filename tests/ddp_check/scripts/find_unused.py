"""Clean run: find_unused_parameters=True; the 512-wide `extra` layer is used on even steps only; 3 ranks."""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 512)
        self.extra = nn.Linear(512, 512)
        self.head = nn.Linear(512, 2)

    def forward(self, x, use_extra):
        h = torch.relu(self.body(x))
        if use_extra:
            h = h + torch.tanh(self.extra(h))
        return self.head(h)


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 6), torch.randint(0, 2, (48,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    ddp = DDP(Net(), find_unused_parameters=True)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.5)
    loss_fn = nn.CrossEntropyLoss()

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(ddp(x, use_extra=(step % 2 == 0)), y).backward()
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
