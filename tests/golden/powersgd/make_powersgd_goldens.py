#!/usr/bin/python3
"""Goldens for the PowerSGD comm hook (src/ddp/hooks/powersgd.h): real torch 1.13 DDP on gloo, one process
and one thread per rank, with `powerSGD_hook` and `PowerSGDState(start_powerSGD_iter=2,
matrix_approximation_rank=R)` (its other defaults: error feedback, warm start, min_compression_rate 2,
random_seed 0). A wrapper hook records, per step and per rank, every call's bucket: index, is_last, the
parameters' names and shapes, the RAW bucket buffer before powerSGD_hook touches it, and the averaged bucket
the hook's future returns. Every model fits one bucket (several buckets deadlock or abort on gloo in 1.13:
docs/hooks_zero_join.md, PowerSGD). The C++ test feeds the raw buckets through ddplab's hook, one
thread per rank, and requires the results bit for bit.

Also `randint.json`: numpy.random.RandomState(seed).randint(1_000_000_000), where 1.13 draws the seed of the
initial Q from.

    /usr/bin/python3 tests/golden/powersgd/make_powersgd_goldens.py      (from the repository root)
"""
import datetime
import json
import os
import shutil
import sys
import tempfile

# The kernels the goldens were computed with, pinned before torch loads as tests/golden/make_goldens.py pins
# them (mp.spawn's children inherit them): OpenBLAS Prescott, one BLAS thread, ATen's AVX2 kernels.
os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2')
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as P
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 5
START = 2
# (file, MLP sizes, matrix_approximation_rank, world size). 8-16-8-16-4 has two same-shape weights apart
# (PowerSGD groups them by shape) and products below bmm's 400 multiply-add threshold (its naive loop).
CASES = [
    ('mlp_rank1_ws2', [32, 64, 64, 10], 1, 2),
    ('mlp_rank1_ws3', [32, 64, 64, 10], 1, 3),
    ('mlp_rank2_ws2', [32, 64, 64, 10], 2, 2),
    ('small_rank1_ws3', [8, 16, 8, 16, 4], 1, 3),
    ('small_rank2_ws2', [8, 16, 8, 16, 4], 2, 2),
    ('small_rank2_ws3', [8, 16, 8, 16, 4], 2, 3),
]


def f32(t):
    return [float('%.9g' % v) for v in t.detach().flatten().tolist()]


def mlp(sizes):
    mods = []
    for i in range(len(sizes) - 1):
        mods.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            mods.append(torch.nn.ReLU())
    return torch.nn.Sequential(*mods)


def rank_main(rank, ws, sizes, mar, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method='file://' + init_file, rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = mlp(sizes)
    ddp = DDP(model)  # bucket_cap_mb 25: one bucket
    state = P.PowerSGDState(process_group=None, matrix_approximation_rank=mar, start_powerSGD_iter=START)
    names = {id(p): n for n, p in model.named_parameters()}
    calls = []

    def hook(st, bucket):
        rec = {'iter': st.iter, 'index': bucket.index(), 'is_last': bucket.is_last(),
               'names': [names[id(p)] for p in bucket.parameters()],
               'shapes': [list(p.shape) for p in bucket.parameters()],
               'raw': bucket.buffer().detach().clone()}
        calls.append(rec)

        def done(fut):
            rec['result'] = fut.value().detach().clone()
            return fut.value()
        return P.powerSGD_hook(st, bucket).then(done)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(STEPS):
        x = torch.randn(8, sizes[0], generator=g)
        y = torch.randn(8, sizes[-1], generator=g)
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        opt.zero_grad()
    tmp = os.path.join(out_dir, f'.rank{rank}.pt')
    torch.save({'calls': calls, 'stats': state.compression_stats()}, tmp)
    os.replace(tmp, os.path.join(out_dir, f'rank{rank}.pt'))
    dist.destroy_process_group()


def run_case(sizes, mar, ws):
    d = tempfile.mkdtemp(prefix='powersgd.')
    try:
        ctx = mp.spawn(rank_main, args=(ws, sizes, mar, os.path.join(d, 'init'), d), nprocs=ws, join=False)
        for p in ctx.processes:
            p.join()
        # A rank sometimes aborts at teardown ("terminate called without an active exception", after its
        # record is saved): what matters is that every rank finished training and saved.
        bad = [r for r in range(ws) if not os.path.exists(os.path.join(d, f'rank{r}.pt'))]
        if bad:
            sys.exit(f'ranks {bad} did not finish (exit codes {[p.exitcode for p in ctx.processes]})')
        return [torch.load(os.path.join(d, f'rank{r}.pt')) for r in range(ws)]
    finally:
        shutil.rmtree(d, ignore_errors=True)


def write(name, doc):
    path = os.path.join(HERE, name)
    fd, tmp = tempfile.mkstemp(dir=HERE, prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    os.replace(tmp, path)
    print('wrote', os.path.relpath(path, os.path.dirname(os.path.dirname(HERE))), flush=True)


def main():
    draws = []
    for seed in (0, 1, 12345, 2**32 - 1):
        r = np.random.RandomState(seed)
        draws.append({'seed': seed, 'values': [int(r.randint(1_000_000_000)) for _ in range(8)]})
    write('randint.json', {'numpy_version': np.__version__, 'draws': draws})
    for name, sizes, mar, ws in CASES:
        res = run_case(sizes, mar, ws)
        ncalls = len(res[0]['calls'])
        calls = []
        for c in range(ncalls):
            recs = [res[r]['calls'][c] for r in range(ws)]
            assert all(x['index'] == recs[0]['index'] and x['names'] == recs[0]['names'] for x in recs)
            # torch's ranks end equal (every rank orthogonalises the same all-reduced sums): one result.
            equal = all(torch.equal(x['result'], recs[0]['result']) for x in recs)
            assert equal, (name, c)
            calls.append({'iter': recs[0]['iter'], 'index': recs[0]['index'], 'is_last': recs[0]['is_last'],
                          'names': recs[0]['names'], 'shapes': recs[0]['shapes'],
                          'raw': [f32(x['raw']) for x in recs], 'result': f32(recs[0]['result']),
                          'ranks_equal': equal})
        doc = {'torch_version': torch.__version__, 'sizes': sizes, 'world_size': ws,
               'matrix_approximation_rank': mar, 'start_powerSGD_iter': START, 'steps': STEPS,
               'compression_stats': list(res[0]['stats']), 'calls': calls}
        write(name + '.json', doc)


if __name__ == '__main__':
    main()
