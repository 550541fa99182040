#!/usr/bin/python3
"""Goldens for DDP's gradient averaging itself, bit for bit: tests/golden/ddp/grads_ws{3,4}.json.

For two DDP iterations (iteration 0 uses one bucket, iteration 1 the rebuilt ones) every rank records
  - its LOCAL gradients: the same module, same parameters, same batch, backward WITHOUT DDP (a deep copy),
  - the AVERAGED gradients DDP leaves in .grad after backward (predivide + gloo ring all-reduce).
The C++ Reducer + ring, fed the local gradients, must reproduce the averaged ones exactly.
Also writes bucket_assignment.json: torch.distributed._compute_bucket_assignment_by_size on a few layouts.

    /usr/bin/python3 tests/golden/ddp/make_grad_goldens.py      (from the repository root)
"""
import copy
import datetime
import json
import os
import sys
import tempfile

LIVE = len(sys.argv) == 3 and sys.argv[1] == '--live'  # reducer_test's live run: see the end of this file
if LIVE:  # the live check deliberately does not pin kernels: ddplab against torch on the machine's own
    os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # one BLAS thread: threaded OpenBLAS adds in another order
else:
    # The kernels the committed goldens were computed with, pinned before torch loads (mp.spawn's children inherit
    # them): OpenBLAS's Prescott kernels (SSE3: every x86-64 CPU since 2005 runs them; an AVX-512 CPU would pick
    # SkylakeX and change the last bits of matrix products), one BLAS thread (threaded OpenBLAS adds in another
    # order; assigned, so an exported value cannot leak in) and ATen's AVX2 kernels (any CPU with AVX2).
    os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2')
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS = [8, 32, 16, 4]


def f32(t):
    return [float('%.9g' % v) for v in t.detach().flatten().tolist()]


def write(path, doc):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    print('wrote', os.path.relpath(path))


def worker(rank, ws, init_file, out_dir, layers):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method='file://' + init_file, rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(12345)
    mods = []
    for i in range(len(layers) - 1):
        mods.append(nn.Linear(layers[i], layers[i + 1]))
        if i + 2 < len(layers):
            mods.append(nn.ReLU())
    model = nn.Sequential(*mods)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator()
    g.manual_seed(1000 + rank)  # each rank its own batch
    iterations = []
    for it in range(2):
        x = torch.randn(8, layers[0], generator=g)
        y = torch.randn(8, layers[-1], generator=g)
        local = copy.deepcopy(model)
        F.mse_loss(local(x), y).backward()
        opt.zero_grad(set_to_none=True)
        F.mse_loss(ddp(x), y).backward()
        iterations.append({'local': [f32(p.grad) for p in local.parameters()],
                           'averaged': [f32(p.grad) for p in model.parameters()]})
        opt.step()
    with open(os.path.join(out_dir, f'rank{rank}.json'), 'w') as f:
        json.dump({'iterations': iterations, 'names': [n for n, _ in model.named_parameters()]}, f)
    dist.destroy_process_group()


def run(ws, layers):
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(ws, os.path.join(d, 'init'), d, layers), nprocs=ws, join=True)
        ranks = [json.load(open(os.path.join(d, f'rank{r}.json'))) for r in range(ws)]
    for it in range(2):  # DDP's invariant: every rank got the same averaged bits
        assert all(r['iterations'][it]['averaged'] == ranks[0]['iterations'][it]['averaged'] for r in ranks)
    return {'world_size': ws, 'layers': layers, 'names': ranks[0]['names'],
            'iterations': [{'local': [r['iterations'][it]['local'] for r in ranks],
                            'averaged': ranks[0]['iterations'][it]['averaged']} for it in range(2)]}


def bucket_assignment():
    cases = []
    for numels, limits in [([24, 4, 8, 2], [1 << 20, 25 << 20]), ([10, 300000, 20, 70000, 5], [1 << 20, 100000]),
                           ([262144, 512, 16384, 512, 5120, 10], [1 << 20, 1 << 19]), ([100] * 10, [400, 800])]:
        tensors = [torch.empty(n) for n in numels]
        order = list(reversed(range(len(numels))))  # gradient-ready order, as at the rebuild
        buckets, _ = dist._compute_bucket_assignment_by_size([tensors[i] for i in order], limits,
                                                            [False] * len(numels), order)
        cases.append({'numels': numels, 'order': order, 'limits': limits, 'buckets': [list(b) for b in buckets]})
    return {'cases': cases}


if __name__ == '__main__':
    if LIVE:  # used by the live test: one multi-bucket run, on this machine's own kernels
        ws, out = 3, sys.argv[2]
        doc = run(ws, [32, 512, 512, 10])
        write(out, doc)
        sys.exit(0)
    for ws in (3, 4):
        write(os.path.join(HERE, f'grads_ws{ws}.json'), run(ws, LAYERS))
    write(os.path.join(HERE, 'bucket_assignment.json'), bucket_assignment())
