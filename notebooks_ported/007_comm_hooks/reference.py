#!/usr/bin/python3
"""Lab 007's claims in PyTorch: the lab's runs under real torch 1.13 DDP (sim/ddp_reference.py: Gloo, one process
per rank, one thread each, torch's own hooks from torch.distributed.algorithms.ddp_comm_hooks registered through
sim/comm_hooks.py, torch.distributed.optim.ZeroRedundancyOptimizer), printed as the lab prints its "check:" lines.
The lab's defaults: MLP 32-64-64-10 ReLU, MSE, 96 random samples (seed 12345), batch 8 per rank, SGD lr 0.05
momentum 0.9, 2 epochs; hooks at world size 2, allreduce_hook against no hook at 2 and 3, ZeRO at 3.

    /usr/bin/python3 notebooks_ported/007_comm_hooks/reference.py > tests/golden/notebooks/007_comm_hooks.txt

Eleven short DDP runs (about a minute). tests/notebooks_test checks that every line it prints is among the lab's.
"""
import json
import os
import sys
import tempfile

os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2')
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'sim'))
import torch  # noqa: E402

import ddp_reference  # noqa: E402

BASE = ['--layers', '32,64,64,10', '--activation', 'relu', '--samples', '96', '--batch-size', '8', '--epochs', '2']
SGD = ['--lr', '0.05', '--momentum', '0.9']
HOOKS = ['none', 'allreduce', 'fp16-compress', 'powersgd', 'noop']


def oracle(*extra):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, 'out.json')
        args = BASE + list(extra) + ['--dump-params', out]
        # The ranks' progress lines go to /dev/null (file descriptor 1, which the spawned ranks inherit): this
        # script prints the check lines only.
        sys.stdout.flush()
        saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        try:
            status = ddp_reference.main(args)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            os.close(devnull)
        if status != 0:
            sys.exit(f'reference: sim/ddp_reference.py {" ".join(args)} failed')
        with open(out) as f:
            return json.load(f)


def params(doc, rank):
    """Rank `rank`'s parameters, flattened in state_dict order (9 significant digits read back to float32)."""
    return torch.cat([torch.tensor(v, dtype=torch.float32).flatten() for v in doc['replicas'][rank].values()])


def g9(v):
    return '%.9g' % v


def plain_state_numel(extra):
    """Floats of optimizer state plain DDP holds on every rank: torch's optimizer over the whole model, stepped
    once (state tensors with dim > 0, as ZeroRedundancyOptimizer's shards are counted)."""
    a = ddp_reference.parse(BASE + extra)
    model = ddp_reference.build_model(a)
    opt = (torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum) if a.optimizer == 'sgd'
           else torch.optim.Adam(model.parameters(), lr=a.lr))
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    return sum(t.numel() for st in opt.state.values() for t in st.values() if torch.is_tensor(t) and t.dim() > 0)


def main():
    torch.set_num_threads(1)
    for hook in HOOKS:
        doc = oracle('--world-size', '2', '--comm-hook', hook, *SGD)
        print(f'check: ws 2 hook {hook} final loss per rank: ' + ' '.join(g9(l[-1]) for l in doc['losses']))
        for r in range(1, 2):
            n = int((params(doc, r) != params(doc, 0)).sum())
            print(f'check: ws 2 hook {hook} rank {r} vs rank 0: {n} of {params(doc, 0).numel()} parameter values differ')
    for ws in (2, 3):
        none = params(oracle('--world-size', str(ws), *SGD), 0)
        hooked = params(oracle('--world-size', str(ws), '--comm-hook', 'allreduce', *SGD), 0)
        print(f'check: ws {ws} allreduce_hook vs no hook after training: {int((hooked != none).sum())} of '
              f'{none.numel()} parameter values differ')
    for what, extra in (('SGD lr 0.05 momentum 0.9', SGD), ('Adam lr 0.01', ['--optimizer', 'adam', '--lr', '0.01'])):
        plain = oracle('--world-size', '3', *extra)
        zero = oracle('--world-size', '3', '--zero', 'true', *extra)
        same = bool(torch.equal(params(zero, 0), params(plain, 0)))
        print(f'check: ZeroRedundancyOptimizer {what} ws 3: state floats per rank '
              + ' '.join(str(n) for n in zero['zero']['state_numel'])
              + f' | plain DDP {plain_state_numel(extra)} on every rank | parameters bitwise plain DDP\'s: {same}')


if __name__ == '__main__':
    main()
