"""torch 2.x's composable data-parallel APIs, traced as their docs use them: DDPTrace(model, optimizer) on the
module itself. --api replicate (torch.distributed._composable.replicate: DDP's arithmetic, recorded and checked
like DDP); --api fully_shard (FSDP2 on the root alone, over a CPU device mesh: one parameter group, recorded and
checked as FSDP2); --api shard_children (fully_shard on the Linear layers but not on the root: the recorder says
in one line that it needs the root, records nothing, and the run trains as it would untraced); --api none (no
data-parallel wrapper at all: the recorder says so in one line, and the run goes on). An MLP, SGD with momentum, DistributedSampler, 3 ranks. torch
1.13 has neither composable API.

    python3 composable.py --out RUN_DIR --api replicate|fully_shard|shard_children|none [...the common options]
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 10), torch.randint(0, 3, (48,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 3))
    if args.api == "replicate":
        from torch.distributed._composable import replicate
        replicate(model)
    elif args.api == "fully_shard":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        fully_shard(model, mesh=init_device_mesh("cpu", (world_size,)))
    elif args.api == "shard_children":
        from torch.distributed.fsdp import fully_shard
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    trace = DDPTrace(model, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    if args.final:  # FSDP2's parameters are DTensor shards: each rank's local shard
        common.save_final_params({n: getattr(p, "_local_tensor", p).detach().cpu().clone()
                                  for n, p in model.named_parameters()}, args)


def options(p):
    p.add_argument("--api", choices=["replicate", "fully_shard", "shard_children", "none"], default="replicate")


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=5, extra=options))
