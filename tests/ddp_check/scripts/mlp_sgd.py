"""Clean run: an MLP, SGD with momentum 0.9, Nesterov and weight decay, DistributedSampler, 3 ranks; its 512x512
layer (1 MiB) fills DDP's first bucket, the first layer goes to a second."""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 10), torch.randint(0, 3, (48,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    model = nn.Sequential(nn.Linear(10, 512), nn.ReLU(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 3))
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(ddp(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace and not args.no_close:  # --no-close: the recorder finishes the trace at the process's exit
        trace.close()
    common.save_final(ddp, args)


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=5))
