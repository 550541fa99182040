#!/usr/bin/python3
"""Rank-0-only work inside a DDP training loop: which collectives does each rank issue, and does it hang?

Real torch DDP (CPU, gloo, 2 ranks, or --world-size N, forked by torch.multiprocessing.start_processes, fresh
file:// rendezvous per case, 5 s gloo timeout per collective). Each rank trains 3 SGD steps on its own batch. DDP is handed a
Python ProcessGroup that logs every collective (the C++ reducer's too) and forwards it to gloo. A rank that
finishes waits for its peers on files, so a peer's unmatched collective blocks until gloo's timeout.
Cases (eval = `ddp.eval(); with torch.no_grad(): ddp(x); ddp.train()` unless said otherwise):
  A  Linear+BatchNorm1d, broadcast_buffers=True; rank 0 evals after step 1   Ad  A, TORCH_DISTRIBUTED_DEBUG=DETAIL
  A2 as A, rank 0 evals after step 2 only      A3  as A, rank 0 evals after steps 2 and 3 (i.e. after the last)
  B  MLP, no buffers; rank 0 evals after every step    C  MLP; rank 0 alone calls dist.barrier() after step 2
  D  fix: A's model, rank 0 evals through ddp.module   E  fix: A's model, every rank evals through ddp
  F  A's model with broadcast_buffers=False; rank 0 evals through ddp after every step
Trace: T<n>[..] training step n, E[..] eval, BAR[..] barrier; buf = buffer broadcast (2 gloo broadcasts),
rb = DDP's one-time bucket-rebuild broadcast at step 2 (2 gloo broadcasts), ar = gradient all-reduce.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 sim/questions/rank0_eval.py [--world-size 2]
"""
import datetime
import json
import os
import re
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
from forwarding_pg import ForwardingPG

TIMEOUT_S = 5
CASES = [  # name, BatchNorm model, who evaluates, how ('ddp' / 'module' / 'barrier'), after which steps
    ('A', True, 'r0', 'ddp', (1,)), ('Ad', True, 'r0', 'ddp', (1,)), ('A2', True, 'r0', 'ddp', (2,)),
    ('A3', True, 'r0', 'ddp', (2, 3)), ('B', False, 'r0', 'ddp', (1, 2, 3)),
    ('C', False, 'r0', 'barrier', (2,)), ('D', True, 'r0', 'module', (1, 2, 3)), ('E', True, 'all', 'ddp', (1, 2, 3)),
    ('F', True, 'r0', 'ddp', (1, 2, 3))]
WORLD = [2]  # --world-size: the forked ranks inherit it


class TracedPG(ForwardingPG):
    """Logs every collective issued on it (a file per rank), then forwards it to the real (gloo) group."""
    def __init__(self, pg, path):
        super().__init__(pg)
        self.path, self.names = path, {}

    def note(self, tok, tensors=()):
        with open(self.path, 'a') as f:  # on disk at once: a rank may die by SIGABRT mid-run
            f.write(self.names.get((tok, sum(t.numel() for t in tensors)), tok) + '\n')

    def seen(self, op, tensors):
        self.note(op, tensors)


def first_line(msg):
    line = (msg.strip().splitlines() or ['?'])[0]
    line = re.sub(r'\[[\d.:a-f]+\]:\d+', '<peer>', line)  # the peer's address and port vary
    line = re.sub(r', TensorDeviceTypes=TensorOptions\(.*?\(nullopt\)\)\)', ')', line)  # DETAIL's long tail
    return re.sub(r'^\[[^\]]*\] ', '', line)  # drop gloo's "[/path/file.cc:NN] " prefix


def outcome(msg):  # stable wording to grep up to '('; gloo's own text (which varies) in parentheses
    return (f'timed out after {TIMEOUT_S}s (gloo: {msg})' if 'timeout' in msg.lower() or 'timed out' in msg.lower()
            else 'error: lost the connection to the peer that died' if 'Connection' in msg or 'Broken pipe' in msg
            else f'error: {msg}')


def worker(rank, work, case):
    name, bn, who, how, after = case
    torch.set_num_threads(1)
    os.dup2(os.open(f'{work}/stderr{rank}', os.O_WRONLY | os.O_CREAT), 2)  # gloo's C++ abort message
    os.environ['TORCH_DISTRIBUTED_DEBUG'] = 'DETAIL' if name == 'Ad' else 'OFF'
    dist.set_debug_level_from_env()
    dist.init_process_group('gloo', init_method=f'file://{work}/init', rank=rank, world_size=WORLD[0],
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    log, out = f'{work}/log{rank}', {'steps': 0}
    pg = TracedPG(dist.group.WORLD, log)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(4, 8)] + ([nn.BatchNorm1d(8)] if bn else []) + [nn.ReLU(), nn.Linear(8, 1)])
    ddp = DDP(model, process_group=pg, broadcast_buffers=name != 'F')
    pg.names = {('bc', sum(b.numel() for b in model.buffers() if b.is_floating_point())): 'buf',
                ('bc', len(list(model.parameters())) + 1): 'rb', ('ar', sum(p.numel() for p in model.parameters())): 'ar'}
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    x_eval = torch.randn(6, 4, generator=g)
    open(log, 'w').close()  # forget DDP's constructor collectives
    try:
        for step in (1, 2, 3):
            pg.note(f'T{step}')
            x, y = torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)
            opt.zero_grad()
            nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
            out['steps'], out['params'] = step, [p.tolist() for p in model.parameters()]
            if step in after and (who == 'all' or rank == 0):
                pg.note('BAR' if how == 'barrier' else 'E')
                if how == 'barrier':
                    pg.note('bar')
                    dist.barrier()  # on the gloo group under DDP's: the same collective sequence
                    continue
                ddp.eval()
                with torch.no_grad():
                    (ddp if how == 'ddp' else ddp.module)(x_eval)
                ddp.train()
        out['outcome'] = 'completed'
    except Exception as e:  # noqa: BLE001 -- the point is to report it
        out['outcome'] = outcome(first_line(str(e)))
    with open(f'{work}/out{rank}.json', 'w') as f:
        json.dump(out, f)
    # Keep the group alive until the peer is done too: a rank that left early would turn its peer's timeout into
    # a lost connection, so the wait is long (a loaded machine can take many seconds to reach the timeout);
    # it ends as soon as every peer's outcome is written, or the parent saw that peer's process end (gone<peer>).
    deadline = time.monotonic() + 12 * TIMEOUT_S
    while (not all(os.path.exists(f'{work}/out{r}.json') or os.path.exists(f'{work}/gone{r}')
                   for r in range(WORLD[0]) if r != rank) and time.monotonic() < deadline):
        time.sleep(0.05)
    os._exit(0)  # no destroy_process_group: it could block on a peer stuck in a collective


def trace(path):
    groups = []
    for t in open(path).read().split():
        if t[0] in 'TEB':
            groups.append([t])
        elif groups and not (t == 'bc' and groups[-1][-1] in ('buf', 'rb')):  # 2nd broadcast of a pair
            groups[-1].append(t)
    return ' '.join(f'{g[0]}[{" ".join(g[1:])}]' for g in groups)


def run(case):
    work = tempfile.mkdtemp(prefix='rank0_eval.')
    try:  # fork, not spawn: the parent runs no torch op, and a forked rank need not re-import torch
        ctx = mp.start_processes(worker, args=(work, case), nprocs=WORLD[0], join=False, start_method='fork')
        deadline = time.monotonic() + 16 * TIMEOUT_S
        while any(p.exitcode is None for p in ctx.processes) and time.monotonic() < deadline:
            for r, p in enumerate(ctx.processes):
                if p.exitcode is not None and not os.path.exists(f'{work}/gone{r}'):
                    open(f'{work}/gone{r}', 'w').close()  # its peer need not wait for it any longer
            time.sleep(0.05)
        res = []
        for r, p in enumerate(ctx.processes):
            if p.exitcode is None:
                p.kill()
            p.join()
            if os.path.exists(f'{work}/out{r}.json'):
                out = json.load(open(f'{work}/out{r}.json'))
            else:
                what = [ln.split('what():')[1] for ln in open(f'{work}/stderr{r}') if 'what():' in ln]
                out = {'outcome': f'process died (exit code {p.exitcode}, gloo abort: '
                                  f'{first_line(what[0]) if what else "no message"})'}
            out['trace'] = trace(f'{work}/log{r}')
            res.append(out)
        return res
    finally:
        shutil.rmtree(work, ignore_errors=True)


WHAT = {'A': 'rank 0 alone evaluates through the DDP wrapper after step 1 (BatchNorm, broadcast_buffers=True)',
        'Ad': 'the same under TORCH_DISTRIBUTED_DEBUG=DETAIL',
        'A2': 'rank 0 alone evaluates through the DDP wrapper after step 2 only (BatchNorm)',
        'A3': 'rank 0 alone evaluates through the DDP wrapper after steps 2 and 3, the last (BatchNorm)',
        'B': 'rank 0 alone evaluates through the DDP wrapper after every step, a model without buffers',
        'C': 'rank 0 alone calls dist.barrier() after step 2',
        'D': 'rank 0 alone evaluates through ddp.module after every step (BatchNorm)',
        'E': 'every rank evaluates through the DDP wrapper after every step (BatchNorm)',
        'F': 'rank 0 alone evaluates through the DDP wrapper after every step, broadcast_buffers=False (BatchNorm)'}


def collectives(trace_text):  # the collectives in the order issued, without the step and evaluation marks
    return re.sub(r'\b[TEB]\w*\[', ' ', trace_text).replace(']', ' ').split()


def summary(res):
    ranks = range(len(res))
    done = 'both ranks complete' if len(res) == 2 else 'every rank completes'
    if any(res[r]['outcome'] != 'completed' for r in ranks):
        return '; '.join(f"rank {r} {o if o.startswith('process died') else o.split(' (')[0]}"
                         for r, o in ((r, res[r]['outcome']) for r in ranks))
    eq = 'equal' if all(res[r]['params'] == res[0]['params'] for r in ranks) else 'differ'
    if all(res[r]['trace'] == res[0]['trace'] for r in ranks):
        return f'{done}, parameters {eq}'
    if any(collectives(res[r]['trace']) != collectives(res[0]['trace']) for r in ranks):
        return f'{done} although they issued different collectives, parameters {eq}'
    evals = re.findall(r'E\[([^\]]*)\]', res[0]['trace'])
    if not any(evals):
        return f"{done}, parameters {eq}: rank 0's evaluation issues no collective"
    return (f"{done}, parameters {eq}: rank 0's evaluation issued a collective ({' '.join(e for e in evals if e)}) "
            f"that its next training step then did not, so the ranks' collectives still pair one for one")


def main():
    WORLD[0] = forked.world_size_arg(2, 'rank-0-only work needs')
    for case in CASES:
        res = run(case)
        for r in range(WORLD[0]):
            print(f"trace: {case[0]} rank{r} issued {res[r]['trace']} -> {res[r]['outcome']}", flush=True)
        print(f"answer: {WHAT[case[0]]}: {summary(res)}", flush=True)


if __name__ == '__main__':
    main()
