"""Clean run: an MLP with weight decay in Adam's foreach (multi-tensor) form and torch's allreduce_hook,
3 ranks, 2 buckets (the hook's div_ then SUM differs in bits from the built-in predivide at world size 3)."""
import torch
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 12), torch.randn(48, 2))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    model = nn.Sequential(nn.Linear(12, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 2))
    ddp = DDP(model)
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=1e-2, weight_decay=1e-2, foreach=True)

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
    common.launch(main, common.parse_args(world_size=3, steps=5))
