#!/usr/bin/python3
"""DDP + torch.utils.checkpoint in torch 1.13: what raises "Expected to mark a variable ready only once",
and do the fixes (use_reentrant=False, static_graph) train to the same parameters?

Real torch DDP (CPU, gloo, 2 ranks forked by torch.multiprocessing.start_processes, fresh file://
rendezvous per case, 5 s timeout per collective, 20 s per case). Model: Linear(4,8) -> block -> Linear(8,1),
block = Sequential(Linear(8,8), Tanh), applied once or twice (the same module, shared weights), each time
plain or through checkpoint(block, h, use_reentrant=...). 3 SGD steps, each rank on its own batch.
Cases: ck = none / reentrant / nonreentrant; uses = 1 or 2; fu = find_unused_parameters;
sg = static_graph=True in the constructor ('arg') or ddp._set_static_graph() after it ('call').

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 sim/questions/reentrant_checkpoint.py
"""
import datetime
import io
import json
import os
import shutil
import tempfile
import time
import warnings

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

import forked

CASES = [  # name, ck, uses, find_unused_parameters, static_graph
    ('plain1', 'none', 1, False, None), ('plain2', 'none', 2, False, None),
    ('re1', 'reentrant', 1, False, None), ('re1_fu', 'reentrant', 1, True, None),
    ('re2', 'reentrant', 2, False, None), ('re2_fu', 'reentrant', 2, True, None),
    ('nr1_fu', 'nonreentrant', 1, True, None), ('nr2', 'nonreentrant', 2, False, None),
    ('re1_fu_sg', 'reentrant', 1, True, 'arg'), ('re2_sg', 'reentrant', 2, False, 'arg'),
    ('re2_sgcall', 'reentrant', 2, False, 'call')]


class Net(nn.Module):
    def __init__(self, ck, uses):
        super().__init__()
        self.inp, self.block, self.out = nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Linear(8, 1)
        self.ck, self.uses = ck, uses

    def forward(self, x):
        h = self.inp(x)  # requires grad, so the reentrant checkpoint's output does too
        for _ in range(self.uses):
            h = self.block(h) if self.ck == 'none' else checkpoint(self.block, h, use_reentrant=self.ck == 'reentrant')
        return self.out(h)


def worker(rank, work, case):
    name, ck, uses, fu, sg = case
    warnings.filterwarnings('ignore')
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{work}/init', rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=5))
    torch.manual_seed(0)
    ddp = DDP(Net(ck, uses), find_unused_parameters=fu, static_graph=sg == 'arg')
    if sg == 'call':
        ddp._set_static_graph()
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(10 + rank)
    out = {'steps': 0}
    try:
        for step in (1, 2, 3):
            x, y = torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)
            opt.zero_grad()
            nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
            out['steps'] = step
        out['outcome'] = 'trains'
    except Exception as e:  # noqa: BLE001 -- the point is to report it
        out['outcome'], out['error'] = 'error', str(e)
    torch.save([p.detach() for p in ddp.module.parameters()], f'{work}/params{rank}.pt')
    with open(f'{work}/out{rank}.json', 'w') as f:
        json.dump(out, f)
    forked.leave(work, rank, 2)


def run(case):
    work = tempfile.mkdtemp(prefix='reentrant_checkpoint.')
    try:  # fork: the parent runs no torch op until every case has run
        ctx = mp.start_processes(worker, args=(work, case), nprocs=2, join=False, start_method='fork')
        deadline = time.monotonic() + 20
        while any(p.exitcode is None for p in ctx.processes) and time.monotonic() < deadline:
            time.sleep(0.05)
        for p in ctx.processes:
            if p.exitcode is None:
                p.kill()
            p.join()
        if not all(os.path.exists(f'{work}/out{r}.json') for r in (0, 1)):
            return {'outcome': 'hung or died'}, None
        outs = [json.load(open(f'{work}/out{r}.json')) for r in (0, 1)]
        with open(f'{work}/params0.pt', 'rb') as f0, open(f'{work}/params1.pt', 'rb') as f1:
            params = (f0.read(), f1.read())
        return (outs[0] if outs[0] == outs[1] else {'outcome': f'ranks differ: {outs}'}), params
    finally:
        shutil.rmtree(work, ignore_errors=True)


def describe(ck, uses, fu, sg):
    block = 'the block run once' if uses == 1 else 'the block run twice in one forward (shared weights)'
    how = {'none': 'no checkpointing', 'reentrant': 'checkpoint(use_reentrant=True)',
           'nonreentrant': 'checkpoint(use_reentrant=False)'}[ck]
    flags = [f'find_unused_parameters={fu}'] + ({'arg': ['static_graph=True'], 'call': ['ddp._set_static_graph()']}
                                                 .get(sg, []))
    return f"{how}, {block}, {', '.join(flags)}"


def main():
    results = {c[0]: run(c) for c in CASES}
    params = {n: [torch.load(io.BytesIO(b)) for b in r[1]] for n, r in results.items() if r[1]}
    same = lambda a, b: all(torch.equal(x, y) for x, y in zip(a, b))  # noqa: E731
    errors = set()
    for name, ck, uses, fu, sg in CASES:
        out = results[name][0]
        line = f"trace: {name} ck={ck} uses={uses} fu={fu} sg={sg or 'no'} -> {out['outcome']}"
        answer = f"answer: {describe(ck, uses, fu, sg)}: "
        if out['outcome'] == 'trains':
            ref = f'plain{uses}'
            equal, plain = same(*params[name]), same(params[name][0], params[ref][0])
            line += f" ranks_equal={equal} equal_to_{ref}={plain}"
            answer += (f"trains, the ranks {'bitwise equal' if equal else 'different'}"
                       + ('' if ck == 'none' else f", {'bitwise equal to' if plain else 'not equal to'} the same run "
                                                  f"without checkpointing"))
        elif 'error' in out:
            first = f"{out['error'].split('. ')[0]}."
            line += f" in step {out['steps'] + 1}: {first}"
            answer += f'RuntimeError in step {out["steps"] + 1}: "{first}"'
            errors.add(out['error'])
        else:
            answer += out['outcome']
        print(line)
        print(answer)
    for i, e in enumerate(sorted(errors)):
        print(f'fact: error text {i}: {" | ".join(e.strip().splitlines())}')


if __name__ == '__main__':
    main()
