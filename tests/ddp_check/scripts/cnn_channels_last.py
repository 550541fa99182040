"""Clean run: a small CNN trained in channels_last (model.to(memory_format=torch.channels_last), inputs likewise),
as the performance guides suggest. DDP's reducer lays each gradient into its bucket in the parameter's own strides,
so Gloo's ring chunks a conv weight in memory order (output channel, kernel row, kernel column, input channel), not
row-major: which rank's chunk an element falls in, and so its addition order, follows the memory layout. 3 ranks,
SGD with momentum; --contiguous trains the same model row-major (the comparison).

    python3 cnn_channels_last.py --out RUN_DIR [--contiguous] [...the common options]
"""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 3, 12, 12), torch.randint(0, 4, (48,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 4))
    fmt = torch.contiguous_format if args.contiguous else torch.channels_last
    model = model.to(memory_format=fmt)
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(ddp(x.to(memory_format=fmt)), y).backward()
            optimizer.step()
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    common.save_final(ddp, args)


def options(p):
    p.add_argument("--contiguous", action="store_true", help="row-major, the comparison")


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=4, extra=options))
