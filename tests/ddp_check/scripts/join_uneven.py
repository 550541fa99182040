"""Clean run: uneven inputs under DDP's Join. 3 ranks, each with its own contiguous shard of one dataset, of
3, 4 and 5 batches: `with Join([ddp_model]):` around the loop, so the ranks that run out of data shadow the others'
all-reduces with zeros (dividing by the initial world size) until every rank is done. 2 buckets.

--join-per-epoch: 2 epochs, a Join context per epoch (ranks rejoin at each epoch's start). --steps is not used: each
rank steps once per batch of its shard."""
import torch
import torch.nn as nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset, TensorDataset

import common
from ddplab_trace import DDPTrace

BATCH = 4


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(80, 10), torch.randint(0, 3, (80,)))
    # Rank r's shard: (3 + r) batches, right after the shards of the ranks before it.
    start = sum(3 + r for r in range(rank)) * BATCH
    shard = Subset(data, range(start, start + (3 + rank) * BATCH))
    loader = DataLoader(shard, batch_size=BATCH, shuffle=False)

    ddp = DDP(nn.Sequential(nn.Linear(10, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 3)))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    if args.join_per_epoch:
        for epoch in range(2):
            with Join([ddp]):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(ddp(x), y).backward()
                    optimizer.step()
    else:
        with Join([ddp]):
            for x, y in loader:
                optimizer.zero_grad()
                loss_fn(ddp(x), y).backward()
                optimizer.step()
    if trace:
        trace.close()
    common.save_final(ddp, args)


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, extra=lambda p: p.add_argument(
        "--join-per-epoch", action="store_true", help="2 epochs, a Join per epoch")))
