"""Clean run: bucket_cap_mb=0.001, so that DDP's rebuilt buckets are several. Under torch 1.13 the first rebuilt
bucket is 1 MiB whatever the cap (dist._DEFAULT_FIRST_BUCKET_BYTES), so the head (ready first) holds 1 MiB of
weights; newer torch closes it at the cap given, like the others (docs/questions.md, question 20)."""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(24, 8), torch.randn(24, 16384))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=2, sampler=sampler)

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16384))
    ddp = DDP(model, bucket_cap_mb=0.001)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(ddp(x), y).backward()
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
    common.launch(main, common.parse_args(world_size=3, steps=4))
