#!/usr/bin/python3
"""Writes the PyTorch goldens for //tests:layers_test (BatchNorm1d/2d, Dropout, Tanh, Sigmoid, GELU and
cross-entropy). Run from the repository root with Debian's python3-torch (1.13):

    /usr/bin/python3 tests/golden/layers/make_layer_goldens.py

It writes tests/golden/layers/norm_act.json. `--out FILE --seed S` writes the same cases from other random
values elsewhere (the test's live check). Floats are printed with 9 significant digits (they read back to the
same float32); doubles with 17. Nothing in the output is hand-edited.
"""
import argparse
import json
import os
import tempfile

# Kernels pinned before torch loads, as tests/golden/make_goldens.py pins them: ATen's AVX2 kernels (the ones
# ddplab reproduces, 8 lanes; an AVX-512 machine would otherwise pick 16-lane kernels that reduce in another
# order), one OpenBLAS thread on Prescott kernels.
os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2')
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))


def f32(t):
    return [float('%.9g' % v) for v in t.detach().flatten().tolist()]


def f64(t):
    return [float('%.17g' % v) for v in t.detach().flatten().tolist()]


def batchnorm_cases(g):
    cases = []
    shapes = [(N, C, H) for N in (1, 5, 32) for C in (1, 3, 8) for H in (1, 4, 8)]
    # Training needs 2 values per channel; the largest planes only with few channels (file size).
    shapes = [(N, C, H, H) for N, C, H in shapes if N * H * H > 1 and N * C * H * H <= 2048]
    shapes += [(N, C) for N in (2, 5, 32) for C in (1, 3, 8, 11)]  # BatchNorm1d on (N, C)
    shapes += [(5, 3, 7), (2, 8, 9)]  # BatchNorm1d on (N, C, L)
    for i, shape in enumerate(shapes):
        C = shape[1]
        bn = nn.BatchNorm2d(C) if len(shape) == 4 else nn.BatchNorm1d(C)
        init = i % 4 == 0  # every fourth case keeps reset_parameters' ones/zeros, 0/1 running stats
        if not init:
            with torch.no_grad():
                bn.weight.copy_(torch.randn(C, generator=g))
                bn.bias.copy_(torch.randn(C, generator=g))
                bn.running_mean.copy_(torch.randn(C, generator=g))
                bn.running_var.copy_(torch.rand(C, generator=g) + 0.5)
        scale, shift = (1.0, 0.0) if i % 2 == 0 else (3.0, 5.0)
        x = (torch.randn(shape, generator=g) * scale + shift).requires_grad_()
        dy = torch.randn(shape, generator=g)
        case = {'shape': list(shape), 'x': f32(x), 'weight': f32(bn.weight), 'bias': f32(bn.bias),
                'running_mean': f32(bn.running_mean), 'running_var': f32(bn.running_var), 'grad_y': f32(dy)}
        bn.eval()
        case['y_eval'] = f32(bn(x))
        bn.train()
        y = bn(x)
        y.backward(dy)
        case.update({'y': f32(y), 'running_mean_after': f32(bn.running_mean), 'running_var_after': f32(bn.running_var),
                     'num_batches_tracked': int(bn.num_batches_tracked), 'grad_x': f32(x.grad),
                     'grad_weight': f32(bn.weight.grad), 'grad_bias': f32(bn.bias.grad)})
        cases.append(case)
    return cases


SPECIAL = [0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 3.0, -3.0, 9.0, -9.0, 10.0, -10.0, 15.0, -15.0, 20.0, -20.0, 88.0,
           -88.0, 100.0, -100.0, 1e4, -1e4]


def activation_cases(g):
    cases = []
    for n in (1, 5, 8, 15, 16, 17, 31, 32, 33, 100):
        for scale in (1.0, 5.0, 50.0):
            cases.append((torch.randn(n, generator=g) * scale, torch.randn(n, generator=g)))
    cases.append((torch.tensor(SPECIAL), torch.randn(len(SPECIAL), generator=g)))
    out = []
    for x, gy in cases:
        case = {'x': f32(x), 'grad_y': f32(gy)}
        for name, make in (('tanh', nn.Tanh), ('sigmoid', nn.Sigmoid), ('gelu', nn.GELU),
                           ('gelu_tanh', lambda: nn.GELU(approximate='tanh'))):
            for mkldnn in ((True, False) if name == 'gelu' else (True,)):
                with torch.backends.mkldnn.flags(enabled=mkldnn):
                    xx = x.clone().requires_grad_()
                    y = make()(xx)
                    y.backward(gy)
                key = name if mkldnn else name + '_no_mkldnn'
                case[key] = {'y': f32(y), 'grad_x': f32(xx.grad)}
        out.append(case)
    return out


def dropout_cases(g):
    cases = []
    for seed in (0, 7):
        for p in (0.25, 0.5):
            for n in (1, 5, 17, 100):
                x = torch.randn(n, generator=g)
                gy = torch.randn(n, generator=g)
                torch.manual_seed(seed)
                xx = x.clone().requires_grad_()
                y = nn.Dropout(p)(xx)  # a module is in training mode when built
                y.backward(gy)
                after = torch.rand(1)  # where the stream stands afterwards
                torch.manual_seed(seed)
                u = torch.rand(n, dtype=torch.float64)
                cases.append({'seed': seed, 'p': p, 'x': f32(x), 'grad_y': f32(gy), 'y': f32(y),
                              'grad_x': f32(xx.grad), 'rand_after': f32(after), 'rand_float64': f64(u)})
    return cases


def cross_entropy_cases(g):
    cases = []
    for rows in (1, 3, 5, 17, 32, 64):
        for cols in (1, 2, 3, 8, 10, 17):
            scale = (1.0, 10.0, 100.0)[(rows + cols) % 3]
            x = (torch.randn(rows, cols, generator=g) * scale).requires_grad_()
            t = torch.randint(0, cols, (rows,), generator=g)
            loss = F.cross_entropy(x, t)
            loss.backward()
            xp = x.detach().clone().requires_grad_()
            tp = torch.softmax(torch.randn(rows, cols, generator=g), 1)
            loss_p = F.cross_entropy(xp, tp)
            loss_p.backward()
            cases.append({'rows': rows, 'cols': cols, 'x': f32(x), 'target': t.tolist(), 'loss': f32(loss),
                          'grad': f32(x.grad), 'target_probs': f32(tp), 'loss_probs': f32(loss_p),
                          'grad_probs': f32(xp.grad)})
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=os.path.join(HERE, 'norm_act.json'))
    ap.add_argument('--seed', type=int, default=16)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(args.seed)
    doc = {'torch_version': torch.__version__, 'command': '/usr/bin/python3 tests/golden/layers/make_layer_goldens.py',
           'batchnorm': batchnorm_cases(g), 'activations': activation_cases(g), 'dropout': dropout_cases(g),
           'cross_entropy': cross_entropy_cases(g)}
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.out)), prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    os.chmod(tmp, 0o644)
    os.replace(tmp, args.out)
    print('wrote', args.out)


if __name__ == '__main__':
    main()
