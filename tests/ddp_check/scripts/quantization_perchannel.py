"""Clean run: DDP with torch's quantization_perchannel_hook (ddp_comm_hooks.quantization_hooks: each rank's gradients
quantized to uint8 per chunk of 512 elements with its own scale and zero point, all-gathered, dequantized and averaged),
3 ranks, all gradients in one bucket.

torch 2.x only on CPU: torch 1.13's hook moves its observer to CUDA whatever the device (measured: RuntimeError
"Invalid device, must be cuda device" at the first backward). One bucket: the hook starts its second all_gather
from the first one's completion callback, so with several buckets the ranks' collectives could interleave."""
import torch
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import quantization_hooks
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(36, 8), torch.randint(0, 4, (36,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    ddp = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)),
              bucket_cap_mb=100)
    ddp.register_comm_hook(state=None, hook=quantization_hooks.quantization_perchannel_hook)
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
    common.launch(main, common.parse_args(world_size=3, steps=4))
