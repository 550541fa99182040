"""The questions' torch runs: ranks forked by torch.multiprocessing.start_processes on one machine, Gloo over a fresh
file:// rendezvous with a timeout per collective, the whole run under a deadline, and what each rank reports
handed back as JSON."""
import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time

import torch.distributed as dist
import torch.multiprocessing as mp


def world_size_arg(default, need):
    """--world-size from the command line (`default` if not given); under 2, one line saying that `need` (a
    phrase ending in its verb) 2 ranks or more, and exit status 2."""
    p = argparse.ArgumentParser()
    p.add_argument('--world-size', type=int, default=default)
    ws = p.parse_args().world_size
    if ws < 2:
        print(f'{os.path.basename(sys.argv[0])}: --world-size {ws}: {need} 2 ranks or more', file=sys.stderr)
        sys.exit(2)
    return ws


def init(rank, work, world_size, seconds=5):
    """This rank's default group: Gloo, `seconds` per collective (a rank that skips one fails, never hangs)."""
    dist.init_process_group('gloo', init_method=f'file://{work}/init', rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=seconds))


def report(work, rank, what):
    """What rank `rank` hands back to the parent."""
    with open(f'{work}/out{rank}.json', 'w') as f:
        json.dump(what, f)


def leave(work, rank, world_size, tag='', seconds=60):
    """End this rank once every rank has reached here: no collective is then in flight, and os._exit skips the
    process group's teardown, which under torchrun or a fork can abort a rank ("terminate called without an
    active exception") after its work is done. Each rank marks `{work}/left{tag}.{rank}` and waits for the rest."""
    open(f'{work}/left{tag}.{rank}', 'w').close()
    deadline = time.monotonic() + seconds
    while not all(os.path.exists(f'{work}/left{tag}.{r}') for r in range(world_size)) and time.monotonic() < deadline:
        time.sleep(0.02)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(worker, nprocs, seconds=60):
    """worker(rank, work) on nprocs forked ranks; {rank: what it reported}, or None past the deadline (the ranks
    killed, one line printed). Fork: the parent has run no torch op, so nothing of its state needs a spawn."""
    work, deadline = tempfile.mkdtemp(prefix='ddplab_question.'), time.monotonic() + seconds
    try:
        ctx = mp.start_processes(worker, args=(work,), nprocs=nprocs, join=False, start_method='fork')
        while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    p.kill()
                print(f'fact: FAILED ({seconds} s deadline)')
                return None
        return {r: json.load(open(f'{work}/out{r}.json')) for r in range(nprocs) if os.path.exists(f'{work}/out{r}.json')}
    finally:
        shutil.rmtree(work, ignore_errors=True)
