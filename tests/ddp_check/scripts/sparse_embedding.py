"""Clean run with a sparse gradient: nn.Embedding(sparse=True) under a dense head, plain SGD, 2 ranks.

DDP all-reduces the embedding's sparse gradient on its own; the recorder lists the embedding in
"unchecked_params" (why "sparse gradient") and records the dense parameters as usual."""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


class BagOfWords(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 8, sparse=True)
        self.head = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, tokens):
        return self.head(self.embed(tokens).mean(dim=1))


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randint(0, 50, (40, 6)), torch.randint(0, 3, (40,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    ddp = DDP(BagOfWords())
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)  # SGD without momentum takes sparse gradients
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
    common.launch(main, common.parse_args(world_size=2, steps=4))
