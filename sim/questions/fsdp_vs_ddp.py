#!/usr/bin/env python3
"""What FSDP2 (`torch.distributed.fsdp.fully_shard`) changes against DDP, and whether it trains the same model:
real torch 2.x, CPU, Gloo, world sizes 2, 3 and 4 (processes forked by torch.multiprocessing.start_processes,
fresh file:// rendezvous, 10 s timeout per collective, 120 s in all).

The same model (an MLP, Linear(16, 64), Tanh, Linear(64, 33), Tanh, Linear(33, 5): 33 rows do not divide by 2,
3 or 4, so some shards are padded), the same data (each rank its own 8 rows per step, seeded per rank), SGD
with momentum 0.9, 5 steps, trained twice: wrapped in DDP, and with fully_shard on every Linear and on the
root. Printed, per world size: what each rank holds (parameters, gradients and momentum buffers, in floats)
under each, and how the two trained models compare, parameter by parameter (FSDP's gathered with
full_tensor()): bitwise equal, or allclose and by how much. Why they can differ: DDP multiplies each gradient
by 1/world_size and sums the ranks' buckets in Gloo's ring order; FSDP sums the ranks' padded, flattened
shards (Gloo's reduce-scatter is its ring all-reduce over the whole flat buffer) and then divides by
world_size. At 2 ranks both are one addition of halves (a * 0.5 + b * 0.5 = (a + b) / 2 in floats, exact
scaling by a power of two); from 3 ranks the division and the order differ.

    /opt/ddplab-torch2/bin/python sim/questions/fsdp_vs_ddp.py     (torch 1.13 has no fully_shard)
"""
import datetime
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import forked

STEPS = 5


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 33), nn.Tanh(), nn.Linear(33, 5))


def train(m, params, rank):
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(STEPS):
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 5, generator=g)
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return opt


def local_numel(t):
    return (t.to_local() if hasattr(t, 'to_local') else t).numel()


def worker(rank, ws, work):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{work}/init', rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=10))
    from torch.distributed.fsdp import fully_shard

    ddp = DDP(model())
    opt = train(ddp, ddp.parameters(), rank)
    held = {'ddp': {'parameters': sum(p.numel() for p in ddp.parameters()),
                    'gradients': sum(p.grad.numel() for p in ddp.parameters()),
                    'momentum': sum(local_numel(s['momentum_buffer']) for s in opt.state.values())}}
    ddp_final = {k: v.detach().clone() for k, v in ddp.module.state_dict().items()}

    fsdp = model()
    for layer in fsdp:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(fsdp)
    opt = train(fsdp, fsdp.parameters(), rank)
    held['fsdp'] = {'parameters': sum(local_numel(p) for p in fsdp.parameters()),
                    'gradients': sum(local_numel(p.grad) for p in fsdp.parameters()),
                    'momentum': sum(local_numel(s['momentum_buffer']) for s in opt.state.values())}
    rows = []
    for name, p in fsdp.state_dict().items():
        full = p.full_tensor() if hasattr(p, 'full_tensor') else p
        d = ddp_final[name]
        rows.append({'name': name, 'numel': d.numel(), 'equal': int((full == d).sum()),
                     'maxdiff': float((full - d).abs().max()), 'allclose': bool(torch.allclose(full, d))})
    with open(f'{work}/out{rank}.json', 'w') as f:
        json.dump({'held': held, 'rows': rows}, f)
    forked.leave(work, rank, ws)


def run(ws):
    work = tempfile.mkdtemp(prefix='fsdp_vs_ddp.')
    try:
        ctx = mp.start_processes(worker, args=(ws, work), nprocs=ws, join=False, start_method='fork')
        deadline = time.monotonic() + 120
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                print(f'fact: world_size {ws}: FAILED (120 s deadline)')
                return False
        outs = [json.load(open(f'{work}/out{r}.json')) for r in range(ws)]
        for r, o in enumerate(outs):
            h = o['held']
            print(f"fact: world_size {ws}, rank {r} holds (floats): DDP parameters {h['ddp']['parameters']} "
                  f"gradients {h['ddp']['gradients']} momentum {h['ddp']['momentum']} | FSDP parameters "
                  f"{h['fsdp']['parameters']} gradients {h['fsdp']['gradients']} momentum {h['fsdp']['momentum']}")
        rows = outs[0]['rows']
        equal, total = sum(x['equal'] for x in rows), sum(x['numel'] for x in rows)
        print(f"fact: world_size {ws}: FSDP's trained model against DDP's: {equal}/{total} floats bitwise equal, "
              f"every parameter allclose={all(x['allclose'] for x in rows)}, "
              f"maxdiff {max(x['maxdiff'] for x in rows):.3g}")
        return True
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        print(f'fact: torch {torch.__version__} has no torch.distributed.fsdp.fully_shard (FSDP2 is torch 2.x)')
        return 2
    print(f'fact: torch {torch.__version__}, CPU, Gloo, {STEPS} SGD steps')
    return 0 if all(run(ws) for ws in (2, 3, 4)) else 1


if __name__ == '__main__':
    sys.exit(main())
