#!/usr/bin/python3
"""mp.spawn against torchrun, and what a collective's timeout does, measured in the torch that runs this script.

1. The same DDP training (CPU, gloo, 3 ranks, nn.Sequential(Linear(6,16), ReLU, Linear(16,2)), 4 SGD steps, each
   rank on its own batch) launched twice: by torch.multiprocessing.spawn (rank passed as the function's first
   argument, the rendezvous a file:// the script picks) and by torchrun (`python -m torch.distributed.run
   --standalone --nproc_per_node 3`: rank and world size in environment variables, init_method env://). Each rank
   writes its parameters and the launcher's environment variables it sees; the two runs' parameters are compared
   bitwise.
2. Timeouts: torch's default timeout for a process group, and what happens when one rank skips a collective: every
   collective on a gloo group created with timeout=3 s, rank 2 skips the all_reduce ranks 0 and 1 issue.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 sim/questions/launchers.py
"""
import datetime
import json
import os
import shutil
import subprocess
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

WORLD_SIZE = 3
LAUNCH_VARS = ['RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT',
               'TORCHELASTIC_RESTART_COUNT', 'TORCHELASTIC_MAX_RESTARTS', 'TORCHELASTIC_RUN_ID', 'GROUP_RANK']


def train(rank, world_size, out):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(4):
        x, y = torch.randn(8, 6, generator=g), torch.randn(8, 2, generator=g)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    torch.save({'params': [p.detach() for p in model.parameters()],
                'env': {k: os.environ[k] for k in LAUNCH_VARS if k in os.environ}}, f'{out}/rank{rank}.pt')
    forked.leave(out, rank, world_size)


def spawned(rank, out):  # mp.spawn passes the process index first
    dist.init_process_group('gloo', init_method=f'file://{out}/init', rank=rank, world_size=WORLD_SIZE,
                            timeout=datetime.timedelta(seconds=30))
    train(rank, WORLD_SIZE, out)


def torchrun_child(out):  # torchrun: every rank reads its place from the environment
    dist.init_process_group('gloo', init_method='env://', timeout=datetime.timedelta(seconds=30))
    train(dist.get_rank(), dist.get_world_size(), out)


def skipper(rank, out):
    dist.init_process_group('gloo', init_method=f'file://{out}/init', rank=rank, world_size=WORLD_SIZE,
                            timeout=datetime.timedelta(seconds=3))
    start, outcome = time.monotonic(), 'completed'
    if rank != 2:
        try:
            dist.all_reduce(torch.ones(4))
        except RuntimeError as e:
            outcome = 'raised RuntimeError (' + str(e).strip().splitlines()[0].split('] ')[-1][:60] + ')'
    else:  # stay connected until the others are done: a rank that left would end their wait at once
        deadline = time.monotonic() + 30
        while not all(os.path.exists(f'{out}/skip{r}.json') for r in (0, 1)) and time.monotonic() < deadline:
            time.sleep(0.05)
    with open(f'{out}/skip{rank}.json', 'w') as f:
        json.dump({'outcome': outcome, 'seconds': time.monotonic() - start}, f)
    os._exit(0)  # no destroy_process_group: a peer may still be waiting in the collective


def main():
    if len(sys.argv) == 3 and sys.argv[1] == '--torchrun-child':
        torchrun_child(sys.argv[2])
        return
    a, b, c = (tempfile.mkdtemp(prefix='launchers.') for _ in range(3))
    try:
        mp.spawn(spawned, args=(a,), nprocs=WORLD_SIZE)
        run = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node',
                              str(WORLD_SIZE), os.path.abspath(__file__), '--torchrun-child', b],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
        if run.returncode != 0:
            sys.exit('torchrun failed:\n' + run.stdout[-3000:])
        sp = [torch.load(f'{a}/rank{r}.pt') for r in range(WORLD_SIZE)]
        tr = [torch.load(f'{b}/rank{r}.pt') for r in range(WORLD_SIZE)]
        for r in range(WORLD_SIZE):
            print(f"fact: rank {r}: mp.spawn sets {sorted(sp[r]['env']) or 'none'} of the launch variables; torchrun "
                  f"sets {' '.join(f'{k}={v}' for k, v in sorted(tr[r]['env'].items()) if 'RUN_ID' not in k)}",
                  flush=True)
        equal = all(torch.equal(x, y) for r in range(WORLD_SIZE) for x, y in zip(sp[r]['params'], tr[r]['params']))
        print(f"answer: mp.spawn or torchrun, the same training ends in bitwise equal parameters on every rank "
              f"({equal}); what differs is how a rank learns its place: mp.spawn passes the rank as the function's "
              f"first argument and sets no variable ({len(sp[0]['env'])} of RANK, WORLD_SIZE, MASTER_ADDR, ...), "
              f"torchrun starts the script once per rank with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and "
              f"MASTER_PORT set (init_method='env://' reads them) and can restart failed ranks "
              f"(TORCHELASTIC_MAX_RESTARTS={tr[0]['env'].get('TORCHELASTIC_MAX_RESTARTS')})", flush=True)

        mp.start_processes(skipper, args=(c,), nprocs=WORLD_SIZE, start_method='fork')
        skip = [json.load(open(f'{c}/skip{r}.json')) for r in range(WORLD_SIZE)]
        for r in range(WORLD_SIZE):
            print(f"fact: timeout 3 s, rank 2 skips the all_reduce: rank {r} {skip[r]['outcome']} after "
                  f"{skip[r]['seconds']:.0f} s{' (it waited for the others)' if r == 2 else ''}", flush=True)
        default = dist.constants.default_pg_timeout
        nccl_default = getattr(dist.constants, 'default_pg_nccl_timeout', None)
        nccl = (f" (for NCCL groups {nccl_default.total_seconds() / 60:.0f} minutes; on a GPU NCCL's watchdog then "
                f"ends the process, not measured here)" if nccl_default else '')
        waited = min(skip[r]['seconds'] for r in (0, 1))
        print(f"answer: a collective that one rank never issues blocks the others until the group's timeout, "
              f"then raises on them (timeout=3 s here: ranks 0 and 1 raised after {waited:.0f} s, "
              f"{'both' if all('raised' in skip[r]['outcome'] for r in (0, 1)) else 'not both'} with RuntimeError); "
              f"init_process_group's default timeout is {default.total_seconds() / 60:.0f} minutes in torch "
              f"{torch.__version__.split('+')[0]}{nccl}, so a mismatched collective looks like a hang", flush=True)
    finally:
        for d in (a, b, c):
            shutil.rmtree(d, ignore_errors=True)


if __name__ == '__main__':
    main()
