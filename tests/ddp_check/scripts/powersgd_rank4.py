"""Clean run: PowerSGD with matrix_approximation_rank=4 (vanilla all-reduce for the first 2 iterations), all
gradients in one bucket, 3 ranks. The 64x64 and 64x12 weights are compressed
(PowerSGD's min_compression_rate 2). ddp_check does not model rank-4 PowerSGD: expected a not-checked note, exit 0.

One bucket on purpose: with several buckets PowerSGD's hook starts each bucket's next all-reduce from the previous
one's completion callback, so on Gloo the ranks issue their collectives in different orders (measured on torch
1.13, a 512x512 layer in a bucket of its own: gloo's "op.preamble.length <= op.nbytes" abort or a hang)."""
import torch
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 12), torch.randint(0, 4, (48,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    ddp = DDP(nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)),
              bucket_cap_mb=100)
    state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=4, start_powerSGD_iter=2)
    ddp.register_comm_hook(state, powerSGD.powerSGD_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
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
    common.launch(main, common.parse_args(world_size=3, steps=5))
