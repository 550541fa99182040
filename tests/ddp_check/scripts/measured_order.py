"""Clean run whose all-reduce order the recorder measures (DDPTrace(..., measure_order=True)) on its own Gloo
process group, at any world size: an MLP whose 1 MiB layer fills DDP's first bucket and bucket_cap_mb=0.01 the
others, so that several bucket sizes are all-reduced, each of them probed at close()."""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16 * world_size, 12), torch.randn(16 * world_size, 40))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    model = nn.Sequential(nn.Linear(12, 256), nn.Tanh(), nn.Linear(256, 1024), nn.Tanh(), nn.Linear(1024, 40))
    ddp = DDP(model, bucket_cap_mb=0.01)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full, measure_order=True) \
        if args.trace else None
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
