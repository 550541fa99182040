"""Real torch 2.x FSDP2 (`fully_shard` on every Linear and the root) over Gloo, one backward: every rank's
unsharded local gradients and its sharded gradients after FSDP's reduce-scatter, for fsdp_reduce_test (issue 42).

The local gradients are taken as PYTORCH_FACTS records it changes no bit: a forward pre-hook on every FSDP
module (it runs after FSDP's all-gather) registers register_post_accumulate_grad_hook on each unsharded,
non-DTensor parameter; the sharded gradient is each DTensor parameter's .grad.to_local() after backward().
The MLP's layers have 64, 33 and 5 rows: at 2, 3 and 4 ranks some shards are short, one is empty at 4.

    /opt/ddplab-torch2/bin/python tests/fsdp/capture_fsdp2.py WORLD_SIZE OUT.json
"""
import datetime
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def worker(rank, ws, work):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{work}/init', rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=30))
    from torch.distributed.fsdp import FSDPModule, fully_shard
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 33), nn.Tanh(), nn.Linear(33, 5))
    for layer in m:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(m)
    local = {}

    def pre_hook(module, args):
        for name, p in module.named_parameters(recurse=False):
            if not hasattr(p, 'to_local') and not getattr(p, '_ddplab_hooked', False):
                p._ddplab_hooked = True
                p.register_post_accumulate_grad_hook(
                    lambda param, key=(id(module), name): local.__setitem__(key, param.grad.detach().clone()))

    for module in m.modules():
        if isinstance(module, FSDPModule):
            module.register_forward_pre_hook(pre_hook)
    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(8, 16, generator=g), torch.randn(8, 5, generator=g)
    nn.functional.mse_loss(m(x), y).backward()
    groups = []
    for i, layer in enumerate(m):
        if isinstance(layer, nn.Linear):
            group = []
            for name in ('weight', 'bias'):
                p = getattr(layer, name)
                shard = p.grad.to_local()
                group.append({'name': f'{i}.{name}', 'shape': list(p.shape),
                              'local': local[(id(layer), name)].flatten().tolist(),
                              'shard_shape': list(shard.shape), 'shard': shard.flatten().tolist()})
            groups.append(group)
    with open(f'{work}/out{rank}.json', 'w') as f:
        json.dump(groups, f)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ws, out = int(sys.argv[1]), sys.argv[2]
    work = tempfile.mkdtemp(prefix='capture_fsdp2.')
    try:
        mp.start_processes(worker, args=(ws, work), nprocs=ws, start_method='fork')
        ranks = [json.load(open(f'{work}/out{r}.json')) for r in range(ws)]
        with open(out, 'w') as f:
            json.dump({'torch': torch.__version__, 'world_size': ws, 'ranks': ranks}, f)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
