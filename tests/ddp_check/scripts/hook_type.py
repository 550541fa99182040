"""Clean run: a comm hook registered the way torch's benchmarks do, register_ddp_comm_hook(DDPCommHookType.NAME,
ddp_model) (default FP16_COMPRESS; --hook-type BF16_COMPRESS or ALLREDUCE), 3 ranks, 2 buckets.

BF16_COMPRESS is torch 2.x only on CPU (torch 1.13 refuses it without CUDA and NCCL, see bf16_hook.py)."""
import torch
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import DDPCommHookType, register_ddp_comm_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(36, 8), torch.randint(0, 4, (36,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    ddp = DDP(nn.Sequential(nn.Linear(8, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 4)))
    register_ddp_comm_hook(DDPCommHookType[args.hook_type], ddp)
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
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    common.save_final(ddp, args)


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=4, extra=lambda p: p.add_argument(
        "--hook-type", default="FP16_COMPRESS", choices=["FP16_COMPRESS", "BF16_COMPRESS", "ALLREDUCE"])))
