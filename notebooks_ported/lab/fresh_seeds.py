#!/usr/bin/python3
"""What the notebook labs say about PyTorch's seeds, checked against the torch this machine has (1.13).

Each check prints one line `ok: ...` or `FAILED: ...`; exit 1 when any failed. tests/notebooks_test runs it.

    /usr/bin/python3 notebooks_ported/lab/fresh_seeds.py

1. A fresh process does NOT start from a fixed seed: torch.initial_seed() differs between processes.
2. 67280421310721 is the seed of a new torch.Generator() object, not of a process's default generator.
3. Seeding with a process's own initial_seed() gives back that process's stream: a rank of the labs'
   --notebook-seeding seeded with the seed it printed draws what a fresh torch process with that seed draws.
4. (with strace) The default CPU generator's seed is the 8 bytes torch reads from /dev/urandom at import.
5. mp.spawn's children (how notebooks 001-003 start their ranks) each get their own seed, and each re-runs
   the main module's top-level statements (notebook 001's module-level torch.manual_seed(123)).
6. DDP(model) makes every rank's parameters rank 0's: unseeded ranks build different models, and after
   DDP's constructor (its broadcast) they are bitwise equal; one step on different batches keeps them so.
"""
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

PY = '/usr/bin/python3'
FAILED = []


def check(ok, what):
    print(('ok: ' if ok else 'FAILED: ') + what, flush=True)
    if not ok:
        FAILED.append(what)


def fresh(code):
    return subprocess.run([PY, '-c', code], check=True, capture_output=True, text=True).stdout.strip()


def spawned(rank, world_size, init_file, out_dir):
    # Start of a notebook rank: no manual_seed anywhere.
    dist.init_process_group('gloo', init_method='file://' + init_file, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    seed = torch.initial_seed()
    model = torch.nn.Linear(4, 3)
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    after = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    x, y = torch.randn(5, 4), torch.randn(5, 3)  # each rank its own "random" batch
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    final = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    torch.save({'seed': seed, 'before': before, 'after': after, 'x': x, 'final': final,
                'module_level': MODULE_LEVEL_RUNS}, os.path.join(out_dir, f'{rank}.pt'))
    dist.barrier()  # no rank tears down while a peer is in its last collective (torch 1.13 aborts it)
    dist.destroy_process_group()


# A module-level statement: mp.spawn's children re-import this file as __mp_main__ and run it again.
MODULE_LEVEL_RUNS = os.getpid()


def main():
    seeds = [int(fresh('import torch; print(torch.initial_seed())')) for _ in range(3)]
    check(len(set(seeds)) == 3, f'three fresh processes started from three seeds: {seeds}')
    check(67280421310721 not in seeds, 'none of them is 67280421310721')
    check(torch.Generator().initial_seed() == 67280421310721,
          f'torch.Generator().initial_seed() == 67280421310721 (got {torch.Generator().initial_seed()})')

    out = fresh('import torch; s = torch.initial_seed(); a = torch.rand(5); torch.manual_seed(s); '
                'b = torch.rand(5); print(s, torch.equal(a, b))').split()
    check(out[1] == 'True', f'a fresh process (seed {out[0]}) draws what manual_seed(its initial_seed()) draws')

    if shutil.which('strace'):
        # -xx: every byte of read() in hex. The read right after open("/dev/urandom") is torch's seed.
        r = subprocess.run(['strace', '-xx', '-e', 'trace=openat,read', PY, '-c',
                            'import torch; print(torch.initial_seed())'], capture_output=True, text=True)
        fd = None
        raw = None
        for line in r.stderr.splitlines():
            m = re.match(r'openat\(AT_FDCWD, "(?:\\x[0-9a-f]{2})+", O_RDONLY\) = (\d+)', line)
            if m and bytes.fromhex(re.search(r'"([^"]*)"', line).group(1).replace('\\x', '')) == b'/dev/urandom':
                fd = m.group(1)
                continue
            m = re.match(r'read\((\d+), "((?:\\x[0-9a-f]{2})*)", 8\) = 8', line)
            if fd is not None and m and m.group(1) == fd:
                raw = bytes.fromhex(m.group(2).replace('\\x', ''))
                break
        seed = int(r.stdout.strip())
        got = int.from_bytes(raw, 'little') if raw else None
        check(got == seed, f'the seed ({seed}) is the 8 bytes read from /dev/urandom at import (read {got})')
    else:
        print('skipped: no strace, the /dev/urandom check')

    world_size = 3
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(spawned, args=(world_size, os.path.join(d, 'init'), d), nprocs=world_size, join=True)
        ranks = [torch.load(os.path.join(d, f'{r}.pt')) for r in range(world_size)]
    spawn_seeds = [r['seed'] for r in ranks]
    check(len(set(spawn_seeds)) == world_size, f'mp.spawn children started from their own seeds: {spawn_seeds}')
    pids = [r['module_level'] for r in ranks]
    check(len(set(pids)) == world_size and os.getpid() not in pids,
          'each mp.spawn child re-ran the main module\'s top-level statements (in its own process)')
    check(all(not torch.equal(ranks[0]['before'], r['before']) for r in ranks[1:]),
          'unseeded ranks built different Linear(4, 3) models before DDP')
    check(all(torch.equal(ranks[0]['before'], r['after']) for r in ranks),
          'after DDP(model) every rank holds rank 0\'s parameters, bitwise')
    check(all(not torch.equal(ranks[0]['x'], r['x']) for r in ranks[1:]), 'every rank drew a different batch')
    check(all(torch.equal(ranks[0]['final'], r['final']) for r in ranks[1:]),
          'after one DDP step on those different batches every rank holds the same parameters, bitwise')
    if FAILED:
        print(f'{len(FAILED)} check(s) failed')
        return 1
    print('all checks passed (torch ' + torch.__version__ + ')')
    return 0


if __name__ == '__main__':
    sys.exit(main())
