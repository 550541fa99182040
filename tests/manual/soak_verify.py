#!/usr/bin/env python3
"""Soak test of the verifier's launcher and fault handling (issue 9), outside the unit suite.

Runs ddp_verify --backend gloo --nproc 4 back to back, each run with a random fault: none, a rank that exits
or hangs at a random all-reduce, a rank killed by SIGKILL, or the launcher itself killed (SIGTERM, SIGINT or
SIGKILL) mid-run. After every run it checks:
  - the exit status is in 0/1/2/3 (runs whose launcher we killed are judged by what they leave behind);
  - no process of the run is left (every process started under the run's own TMPDIR marker is gone);
  - no file is left behind (the run's TMPDIR is empty: rendezvous directories, checkpoints, temporaries).

    bazel build //verify:ddp_verify && tests/manual/soak_verify.py --runs 200 [--seed 1]

Prints one line per run and a summary: runs, faults injected by kind, exit statuses, leftovers.
"""
import argparse
import collections
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def processes_with(marker):
    """PIDs whose environment holds TMPDIR=marker (the launcher and every rank inherit it)."""
    found = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open(f'/proc/{pid}/environ', 'rb') as f:
                if f'TMPDIR={marker}'.encode() in f.read().split(b'\0'):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--runs', type=int, default=200)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--binary', default='bazel-bin/verify/ddp_verify')
    ap.add_argument('--timeout', default='3', help="ddp_verify's --timeout (s)")
    a = ap.parse_args()
    if not os.access(a.binary, os.X_OK):
        print(f'soak: {a.binary} is not built (bazel build //verify:ddp_verify)', file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    kinds = ['none', 'exit', 'hang', 'sigkill-rank', 'kill-launcher']
    injected = collections.Counter()
    statuses = collections.Counter()
    leftovers = []
    t_start = time.time()
    for run in range(a.runs):
        kind = rng.choice(kinds)
        injected[kind] += 1
        tmp = tempfile.mkdtemp(prefix='ddplab_soak.')
        env = dict(os.environ, TMPDIR=tmp)
        cmd = [a.binary, '--backend', 'gloo', '--nproc', '4', '--timeout', a.timeout, '--quiet',
               '--epochs', str(rng.randint(1, 3))]
        rank = rng.randrange(4)
        if kind in ('exit', 'hang'):
            cmd += ['--fault', kind, '--fault-rank', str(rank), '--fault-at', str(rng.randint(1, 5))]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        what = kind
        if kind == 'sigkill-rank':
            time.sleep(rng.uniform(0.05, 0.3))
            ranks = [q for q in processes_with(tmp) if q != p.pid]
            if ranks:
                os.kill(rng.choice(ranks), signal.SIGKILL)
            else:
                what += ' (run ended first)'
        elif kind == 'kill-launcher':
            sig = rng.choice([signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
            time.sleep(rng.uniform(0.05, 0.6))
            p.send_signal(sig)
            what += f' {sig.name}'
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            leftovers.append(f'run {run}: launcher still running after 60 s')
        status = p.returncode
        statuses[status] += 1
        if kind != 'kill-launcher' and status not in (0, 1, 2, 3):
            leftovers.append(f'run {run} ({what}): exit status {status}: {err.strip()[-200:]}')
        # Give orphans (if any) a moment to show up, then look.
        deadline = time.time() + (3.0 if kind == 'kill-launcher' else 0.5)
        left = processes_with(tmp)
        while left and time.time() < deadline:
            time.sleep(0.1)
            left = processes_with(tmp)
        if left:
            leftovers.append(f'run {run} ({what}): processes left: {left}')
            for q in left:
                try:
                    os.kill(q, signal.SIGKILL)
                except OSError:
                    pass
        files = os.listdir(tmp)
        if files:
            leftovers.append(f'run {run} ({what}): files left in TMPDIR: {files}')
        shutil.rmtree(tmp, ignore_errors=True)
        print(f'run {run:3d}: {what:28s} exit {status:4d}  {"LEFTOVER" if (left or files) else "clean"}', flush=True)
    print(f'soak: {a.runs} runs in {time.time() - t_start:.0f} s; faults injected: '
          + ', '.join(f'{k} {injected[k]}' for k in kinds))
    print('soak: exit statuses: ' + ', '.join(f'{s}: {n}' for s, n in sorted(statuses.items())))
    print(f'soak: leftovers: {len(leftovers)}')
    for line in leftovers:
        print('  ' + line)
    return 1 if leftovers else 0


if __name__ == '__main__':
    sys.exit(main())
