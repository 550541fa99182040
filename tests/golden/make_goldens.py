#!/usr/bin/python3
"""Writes the PyTorch goldens the C++ tests compare against. Run from the repository root:

    /usr/bin/python3 tests/golden/make_goldens.py

with Debian's python3-torch (1.13). Every file here is produced by this script; nothing is hand-edited.
Floats are float32 values printed with 9 significant digits (they read back to the exact same float32).
"""
import json
import math
import os
import subprocess
import sys
import tempfile

# The kernels the committed goldens were computed with, pinned before torch loads (the reference.py subprocesses inherit
# them): OpenBLAS's Prescott kernels (SSE3: every x86-64 CPU since 2005 runs them; an AVX-512 CPU would pick
# SkylakeX and change the last bits of matrix products), one BLAS thread (threaded OpenBLAS adds in another
# order; assigned, so an exported value cannot leak in) and ATen's AVX2 kernels (any CPU with AVX2).
# The live checks in the tests deliberately do not pin: they compare ddplab and torch on the machine's own
# kernels.
os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2')
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
torch.set_num_threads(1)


def f32(t):
    return [float('%.9g' % v) for v in t.detach().flatten().tolist()]


def write(name, doc):
    path = os.path.join(HERE, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    os.replace(tmp, path)
    print('wrote', os.path.relpath(path, ROOT))


def rng():
    seeds = [0, 1, 12345, 2**32 + 7, 987654321012]
    doc = {'torch_version': torch.__version__, 'randn': [], 'rand': [], 'randperm': [], 'random_int64': [],
           'randn_sequence': [], 'uniform': []}
    for s in seeds:
        for n in list(range(1, 41)) + [1000]:
            torch.manual_seed(s)
            doc['randn'].append({'seed': s, 'n': n, 'values': f32(torch.randn(n))})
        for n in [1, 5, 16, 33, 1000]:
            torch.manual_seed(s)
            doc['rand'].append({'seed': s, 'n': n, 'values': f32(torch.rand(n))})
        for n in [1, 2, 10, 1000]:
            g = torch.Generator()
            g.manual_seed(s)
            doc['randperm'].append({'seed': s, 'n': n, 'values': torch.randperm(n, generator=g).tolist()})
        torch.manual_seed(s)
        doc['random_int64'].append({'seed': s, 'values': [
            int(torch.empty((), dtype=torch.int64).random_().item()) for _ in range(5)]})
        # The scalar path's cached second sample survives across calls and across a vectorized randn.
        for sizes in [[3, 3], [1, 1, 1, 1], [5, 20, 3], [7, 16, 1]]:
            torch.manual_seed(s)
            doc['randn_sequence'].append({'seed': s, 'sizes': sizes,
                                          'values': [f32(torch.randn(n)) for n in sizes]})
        for lo, hi, n in [(-0.5, 0.5, 24), (-0.40824829046386296, 0.40824829046386296, 17), (2.0, 3.5, 5)]:
            torch.manual_seed(s)
            doc['uniform'].append({'seed': s, 'from': lo, 'to': hi, 'n': n,
                                   'values': f32(torch.empty(n).uniform_(lo, hi))})
    write('rng.json', doc)


def linear_init():
    cases = []
    for seed in [0, 12345, 31337]:
        for fin, fout in [(6, 4), (4, 2), (2, 30), (30, 20), (20, 2), (10, 10), (1, 1), (100, 3), (3, 17)]:
            torch.manual_seed(seed)
            lin = nn.Linear(fin, fout)
            cases.append({'seed': seed, 'in': fin, 'out': fout, 'weight': f32(lin.weight), 'bias': f32(lin.bias)})
    # Two layers in a row draw from one stream: notebook 000's MLP.
    torch.manual_seed(12345)
    l1, l2 = nn.Linear(6, 4), nn.Linear(4, 2)
    write('linear_init.json', {'cases': cases, 'mlp_6_4_2': {
        'seed': 12345, 'params': [f32(l1.weight), f32(l1.bias), f32(l2.weight), f32(l2.bias)]}})


def mlp_grads():
    """Forward, loss and gradients of small MLPs: allclose targets for nn/loss backward."""
    cases = []
    for seed, sizes, relu, batch, loss in [(0, [5, 7, 3], True, 4, 'mse'), (1, [5, 7, 3], True, 4, 'ce'),
                                           (2, [2, 30, 20, 2], True, 5, 'ce'), (3, [6, 4, 2], False, 32, 'mse'),
                                           (4, [10, 10, 5], True, 8, 'mse'), (5, [20, 1], False, 32, 'mse')]:
        torch.manual_seed(seed)
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if relu and i + 2 < len(sizes):
                layers.append(nn.ReLU())
        model = nn.Sequential(*layers)
        x = torch.randn(batch, sizes[0])
        y = torch.randn(batch, sizes[-1])
        labels = torch.randint(0, sizes[-1], (batch,))
        out = model(x)
        l = F.mse_loss(out, y) if loss == 'mse' else F.cross_entropy(out, labels)
        l.backward()
        linears = [m for m in model if isinstance(m, nn.Linear)]
        cases.append({'seed': seed, 'sizes': sizes, 'relu': relu, 'batch': batch, 'loss_fn': loss,
                      'x': f32(x), 'y': f32(y), 'labels': labels.tolist(), 'out': f32(out), 'loss': f32(l)[0],
                      'params': [f32(p) for m in linears for p in (m.weight, m.bias)],
                      'grads': [f32(p.grad) for m in linears for p in (m.weight, m.bias)]})
    write('mlp_grads.json', {'cases': cases})


def replay_optimizer(optimizer, option_sets, seed, numel, steps, grad_scale):
    """One case per option set: a parameter and `steps` gradients drawn after manual_seed(seed), and the
    parameter after each optimizer step. The update itself must be bitwise."""
    cases = []
    for opts in option_sets:
        torch.manual_seed(seed)
        p = torch.nn.Parameter(torch.randn(numel))
        p0 = f32(p)
        grads = [torch.randn(numel) * grad_scale for _ in range(steps)]
        opt = optimizer([p], **opts)
        after = []
        for g in grads:
            p.grad = g.clone()
            opt.step()
            after.append(f32(p))
        cases.append({'options': opts, 'param': p0, 'grads': [f32(g) for g in grads], 'after_each_step': after})
    return {'cases': cases}


def sgd():
    write('sgd.json', replay_optimizer(
        torch.optim.SGD,
        [dict(lr=0.01), dict(lr=0.5), dict(lr=0.1, momentum=0.9), dict(lr=0.1, momentum=0.9, dampening=0.1),
         dict(lr=0.05, momentum=0.9, nesterov=True), dict(lr=0.01, weight_decay=1e-4),
         dict(lr=0.03, momentum=0.8, weight_decay=0.01, nesterov=True)],
        seed=7, numel=37, steps=3, grad_scale=1.0))


def adam():
    write('adam.json', replay_optimizer(
        torch.optim.Adam,
        [dict(lr=0.02), dict(lr=0.001), dict(lr=0.1, betas=(0.8, 0.99), eps=1e-6), dict(lr=0.01, weight_decay=0.01)],
        seed=8, numel=41, steps=4, grad_scale=0.1))


def column_sums():
    """tensor.sum(0) of [rows, cols] float32: PyTorch's cascade order, for nn's bias gradients. The inputs
    are torch.randn(rows, cols) drawn in order from one Generator seeded 31: the test redraws them."""
    cases = []
    g = torch.Generator()
    g.manual_seed(31)
    for rows in [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100, 257]:
        for cols in [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 40, 70]:
            x = torch.randn(rows, cols, generator=g)
            cases.append({'rows': rows, 'cols': cols, 'sum0': f32(x.sum(0))})
    write('column_sums.json', {'cases': cases})


def samplers():
    cases = []
    for n in [5, 10, 64, 101]:
        for r in [1, 2, 3, 4, 7]:
            for shuffle in [False, True]:
                for drop_last in [False, True]:
                    for seed in ([0, 42] if shuffle else [0]):
                        for epoch in ([0, 1, 5] if shuffle else [0]):
                            ranks = []
                            for rank in range(r):
                                s = DistributedSampler(range(n), num_replicas=r, rank=rank, shuffle=shuffle,
                                                       seed=seed, drop_last=drop_last)
                                s.set_epoch(epoch)
                                ranks.append(list(s))
                            cases.append({'n': n, 'num_replicas': r, 'shuffle': shuffle, 'drop_last': drop_last,
                                          'seed': seed, 'epoch': epoch, 'ranks': ranks})
    # More replicas than samples: the padding repeats the whole permutation.
    ranks = []
    for k in range(8):
        s = DistributedSampler(range(3), num_replicas=8, rank=k, seed=3)
        s.set_epoch(2)
        ranks.append(list(s))
    cases.append({'n': 3, 'num_replicas': 8, 'shuffle': True, 'drop_last': False, 'seed': 3, 'epoch': 2,
                  'ranks': ranks})
    # DataLoader(shuffle=True) after manual_seed: two int64 draws per epoch from the global generator.
    loaders = []
    for seed, n, bs, drop_last in [(0, 10, 3, False), (12345, 64, 32, False), (7, 11, 4, True)]:
        torch.manual_seed(seed)
        dl = DataLoader(range(n), batch_size=bs, shuffle=True, drop_last=drop_last)
        epochs = [[b.tolist() for b in dl] for _ in range(3)]
        after = f32(torch.randn(3))
        loaders.append({'seed': seed, 'n': n, 'batch_size': bs, 'drop_last': drop_last, 'epochs': epochs,
                        'randn3_after': after})
    write('sampler.json', {'distributed_sampler': cases, 'shuffled_loader': loaders})


def compare():
    """torch.allclose verdicts and Python's repr of float32 maxdiffs, for compare_test."""
    torch.manual_seed(99)
    pairs = []
    base = torch.randn(50)
    for scale in [0.0, 1e-9, 1e-7, 1e-6, 1e-5, 1e-4]:
        other = base + scale * torch.randn(50)
        pairs.append({'a': f32(other), 'b': f32(base), 'exact': bool(torch.all(other == base)),
                      'approximate': torch.allclose(other, base), 'maxdiff': (other - base).abs().max().item()})
    tiny = torch.tensor([0.0, 1e-8, -2e-8, 5e-9])
    pairs.append({'a': f32(tiny), 'b': f32(torch.zeros(4)), 'exact': False,
                  'approximate': torch.allclose(tiny, torch.zeros(4)), 'maxdiff': tiny.abs().max().item()})
    values = [0.0, 1.0, 0.5, 1e-4, 9.5e-5, 1.1920928955078125e-07, 2.1911, 123456.789, 1e16, 1.5e16, 3e-45,
              float(torch.tensor(0.1)), float(torch.tensor(2.0 ** 60)), 5.960464477539063e-08, 1e22, 12345678.0]
    reprs = [{'value': v, 'repr': repr(float(torch.tensor(v, dtype=torch.float32)))} for v in values]
    write('compare.json', {'pairs': pairs, 'reprs': reprs})


def two_replica():
    configs = {
        'notebook': [],
        'r3_s96': ['--replicas', '3', '--samples', '96'],
        'r4_seed7_b8': ['--replicas', '4', '--seed', '7', '--samples', '40', '--batch-size', '8'],
        'wide': ['--seed', '2024', '--samples', '50', '--batch-size', '20', '--in-features', '33',
                 '--hidden', '17', '--out-features', '5', '--lr', '0.1'],
        'r1': ['--replicas', '1', '--samples', '10', '--batch-size', '4'],
    }
    ref = os.path.join(ROOT, 'notebooks_ported', '000_two_replica', 'reference.py')
    index = {}
    for name, args in configs.items():
        out = os.path.join(HERE, 'two_replica', name + '.json')
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.run([sys.executable, ref] + args + ['--dump-params', out], check=True, stdout=subprocess.DEVNULL)
        index[name] = args
        print('wrote', os.path.relpath(out, ROOT))
    write('two_replica/configs.json', index)


if __name__ == '__main__':
    rng()
    linear_init()
    mlp_grads()
    sgd()
    adam()
    column_sums()
    samplers()
    compare()
    two_replica()
