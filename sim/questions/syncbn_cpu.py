#!/usr/bin/python3
"""SyncBatchNorm on CPU/gloo in torch 1.13: what fails, and what SyncBatchNorm would have computed.

Real torch (CPU, gloo, 2 ranks forked by torch.multiprocessing.start_processes, fresh file:// rendezvous,
5 s timeout per collective, 30 s in all). Model: Linear(3,4) -> BatchNorm1d(4), converted with
nn.SyncBatchNorm.convert_sync_batchnorm. Then SyncBatchNorm's training-mode arithmetic by hand, as its
autograd function does it: each rank's mean, biased var and count, all_gather'ed over gloo, combined into
the mean/var of the union of both ranks' batches (uneven: rank 0 has 6 rows, rank 1 has 4), compared with
one BatchNorm1d on the concatenated 10-row batch: the normalized output and the running_mean/running_var
update (running_var takes the unbiased var with the total count N=10: var * N/(N-1)).

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 sim/questions/syncbn_cpu.py
"""
import copy
import datetime
import json
import os
import shutil
import tempfile
import time

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import forked

ROWS = (6, 4)  # each rank's batch size
C = 4


def err(fn):
    try:
        fn()
        return 'no error'
    except Exception as e:  # noqa: BLE001
        return f'{type(e).__name__}: {str(e).strip().splitlines()[0]}'


def worker(rank, work):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{work}/init', rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=5))
    facts = []
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, C), nn.BatchNorm1d(C))
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.uniform_(-0.5, 0.5)
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    sync = nn.SyncBatchNorm.convert_sync_batchnorm(copy.deepcopy(model))
    xs = [torch.randn(n, 3, generator=torch.Generator().manual_seed(5 + r)) for r, n in enumerate(ROWS)]
    facts.append(f'convert_sync_batchnorm: layer 1 is {type(sync[1]).__name__}, weights kept='
                 f'{all(torch.equal(a, b) for a, b in zip(sync.state_dict().values(), model.state_dict().values()))}')
    facts.append(f'DDP(converted model) on CPU: {err(lambda: DDP(sync))}')
    facts.append(f'converted model forward, train mode, no DDP: {err(lambda: sync(xs[rank]))}')
    facts.append(f'converted model forward, eval mode, no DDP: {err(lambda: sync.eval()(xs[rank]))}')

    # SyncBatchNorm's arithmetic by hand: local stats -> all_gather -> count-weighted union stats
    bn, eps, m = model[1], model[1].eps, model[1].momentum
    with torch.no_grad():
        h = model[0](xs[rank])  # this rank's input to the BatchNorm
        local = torch.cat([h.mean(0), h.var(0, unbiased=False), torch.tensor([float(len(h))])])
        gathered = [torch.empty_like(local) for _ in range(2)]
        dist.all_gather(gathered, local)
        g = torch.stack(gathered)
        mean_r, var_r, n_r = g[:, :C], g[:, C:2 * C], g[:, 2 * C:]
        n = n_r.sum()
        mean = (n_r * mean_r).sum(0) / n
        var = (n_r * (var_r + (mean_r - mean) ** 2)).sum(0) / n  # biased var of the union
        y_hand = (h - mean) / torch.sqrt(var + eps) * bn.weight + bn.bias
        rm_hand = (1 - m) * bn.running_mean + m * mean
        rv_hand = (1 - m) * bn.running_var + m * var * n / (n - 1)
        rv_local_n = (1 - m) * bn.running_var + m * var * len(h) / (len(h) - 1)  # Bessel with this rank's count
        rm_naive = (1 - m) * bn.running_mean + m * mean_r.mean(0)  # the ranks' means averaged, counts ignored
        # one device, the concatenated batch
        one = copy.deepcopy(model).train()
        y_one = one(torch.cat(xs))[sum(ROWS[:rank]):sum(ROWS[:rank + 1])]
    d = lambda a, b: f'equal={torch.equal(a, b)} allclose={torch.allclose(a, b)} max_abs_diff={(a - b).abs().max().item():.3g}'  # noqa: E731
    res = {'out': d(y_hand, y_one), 'rm': d(rm_hand, one[1].running_mean), 'rv': d(rv_hand, one[1].running_var),
           'rv_local_n': d(rv_local_n, one[1].running_var), 'rm_naive': d(rm_naive, one[1].running_mean)}
    with open(f'{work}/out{rank}.json', 'w') as f:
        json.dump({'facts': facts, 'res': res}, f)
    forked.leave(work, rank, 2)


def main():
    work = tempfile.mkdtemp(prefix='syncbn_cpu.')
    try:  # fork: the parent runs no torch op
        ctx = mp.start_processes(worker, args=(work,), nprocs=2, join=False, start_method='fork')
        deadline = time.monotonic() + 30
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                print('fact: FAILED (30 s deadline)')
                return 1
        outs = [json.load(open(f'{work}/out{r}.json')) for r in (0, 1)]
        for line in outs[0]['facts']:
            print(f'fact: {line}')
        what = {'out': 'normalized output (this rank\'s rows)', 'rm': 'running_mean',
                'rv': 'running_var (union var * N/(N-1), N=10)', 'rv_local_n': 'running_var with n/(n-1), n=local rows',
                'rm_naive': 'running_mean from the unweighted mean of the ranks\' means'}
        for k, label in what.items():
            for r in (0, 1):
                print(f"fact: by hand vs BatchNorm1d on concatenated batch, {label}, rank{r}: {outs[r]['res'][k]}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    raise SystemExit(main())
