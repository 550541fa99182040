#!/usr/bin/python3
"""Goldens for src/nn's Conv2d and MaxPool2d kernels (tests/conv2d_test.cc), from Debian's torch 1.13:

    /usr/bin/python3 tests/golden/layers/make_conv_goldens.py            (from the repository root)

writes tests/golden/layers/conv2d.json and maxpool2d.json. With `--live OUT` it writes both into the one file
OUT instead, on this machine's own kernels (conv2d_live_test).

Every input is drawn from torch's global generator after torch.manual_seed(case seed), in this order:
the layer's reset_parameters (Conv2d), the input x = randn(n, c, h, w), then grad_y = randn(y.shape);
the C++ test draws the same values with ddplab::Generator, so the files hold only what torch computed.
MaxPool inputs are then made pooling-like: r = round(2x)/2, then r where r > 0 else +0 (ties, as after a
ReLU), with NaN and -inf written at the listed flat positions.
"""
import json
import os
import sys
import tempfile

LIVE = len(sys.argv) == 3 and sys.argv[1] == '--live'
if LIVE:  # the live check deliberately does not pin: ddplab against torch on this machine's own kernels
    os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # threaded OpenBLAS adds in another order
else:
    # Pinned before torch loads, as tests/golden/make_goldens.py pins them, plus oneDNN's ISA: OpenBLAS's
    # Prescott kernels (slow_conv2d's sgemm), ATen's AVX2 kernels (the bias gradient's sum), and oneDNN's
    # AVX2 kernels (oneDNN picks its convolution kernels and blocked layouts by the CPU: avx512_core ones
    # on an AVX-512 machine; capped at AVX2 the goldens are the same on any AVX2 machine). conv2d_test
    # runs with the same variables set (tests/BUILD).
    os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2',
                      ONEDNN_MAX_CPU_ISA='AVX2')
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import profile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
torch.set_num_threads(1)


def f32(t):
    """float32 values with 9 significant digits (they read back exactly); NaN and infinities as strings."""
    out = []
    for v in t.detach().flatten().tolist():
        out.append(repr(v) if v != v or v in (float('inf'), float('-inf')) else float('%.9g' % v))
    return out


# (n, c_in, h, w, c_out, kernel, stride, padding, bias, x needs grad). The digits CNN's two convolutions at
# batch 1, 7 and 32, then stride 2, no bias, a first layer (no grad_x), 1x1 kernels (slow_conv2d below batch
# 16, oneDNN from 16 or with a stride), odd sizes, a 5x5 kernel and single output channels.
CONV_CASES = [
    (1, 1, 8, 8, 8, 3, 1, 1, True, True),
    (7, 1, 8, 8, 8, 3, 1, 1, True, True),
    (32, 1, 8, 8, 8, 3, 1, 1, True, True),
    (1, 8, 4, 4, 16, 3, 1, 1, True, True),
    (7, 8, 4, 4, 16, 3, 1, 1, True, True),
    (32, 8, 4, 4, 16, 3, 1, 1, True, True),
    (2, 1, 8, 8, 8, 3, 1, 1, True, False),
    (3, 8, 8, 8, 16, 3, 2, 1, True, True),
    (7, 8, 4, 4, 16, 3, 1, 1, False, True),
    (1, 8, 8, 8, 16, 3, 2, 0, False, True),
    (3, 8, 8, 8, 16, 1, 1, 0, True, True),
    (15, 8, 4, 4, 16, 1, 1, 0, True, True),
    (16, 8, 4, 4, 16, 1, 1, 0, True, True),
    (7, 8, 8, 8, 16, 1, 2, 0, True, True),
    (5, 3, 9, 7, 4, 3, 2, 0, True, True),
    (2, 4, 6, 6, 10, 5, 1, 2, True, True),
    (1, 3, 5, 5, 1, 3, 1, 0, True, True),
    (4, 2, 3, 3, 1, 3, 1, 1, True, True),
    # slow_conv2d's bias gradient through each of the shapes TensorIterator gives sum((0, 2, 3)): a 1x1
    # output (n = 1 and n > 1), one output channel (n*h*w coalesced), h*w below 8 with several images.
    (1, 4, 3, 3, 6, 3, 1, 0, True, True),
    (5, 8, 1, 1, 12, 1, 1, 0, True, True),
    (3, 4, 2, 2, 1, 1, 1, 0, True, True),
    (3, 8, 2, 2, 16, 1, 1, 0, True, True),
]
# Shapes run only to record which algorithm torch chose (use_mkldnn() at one thread), around its thresholds:
# 1x1 kernels below batch 16 without a stride, and single images of at most 20480 elements with kernels of
# at most 3 go to slow_conv2d. (n, c_in, h, w, c_out, kernel, stride, padding)
DISPATCH_CASES = [
    (1, 2, 80, 128, 4, 3, 1, 1), (1, 2, 80, 129, 4, 3, 1, 1), (1, 1, 8, 8, 4, 4, 1, 1), (1, 1, 8, 8, 4, 5, 1, 2),
    (1, 4, 8, 8, 4, 4, 1, 0), (1, 4, 9, 9, 4, 3, 2, 0), (2, 1, 3, 3, 1, 3, 1, 0), (1, 16, 8, 8, 4, 1, 2, 0),
    (15, 8, 4, 4, 4, 1, 1, 0), (16, 8, 4, 4, 4, 1, 1, 0), (15, 8, 4, 4, 4, 1, 1, 1), (1, 8, 64, 64, 4, 1, 1, 0),
    (1, 6, 64, 64, 4, 1, 2, 0), (1, 1, 8, 8, 4, 1, 1, 0),
]
# (n, c, h, w, kernel, stride, padding, nan positions, -inf positions)
POOL_CASES = [
    (1, 8, 8, 8, 2, 2, 0, [], []),
    (7, 8, 8, 8, 2, 2, 0, [], []),
    (32, 16, 4, 4, 2, 2, 0, [], []),
    (3, 2, 5, 7, 2, 2, 0, [], []),
    (2, 3, 7, 7, 3, 2, 1, [], []),
    (2, 2, 6, 6, 3, 1, 0, [], []),
    (1, 2, 4, 4, 2, 2, 0, [0, 5, 10, 11, 14, 18], [2, 3, 6, 7, 24, 25, 28]),
]


def backend(fn):
    """'onednn' or 'slow': which convolution torch ran inside fn (aten::mkldnn_convolution or thnn_conv2d)."""
    with profile() as prof:
        fn()
    names = {e.name for e in prof.events()}
    assert ('aten::mkldnn_convolution' in names) != ('aten::thnn_conv2d' in names), names
    return 'onednn' if 'aten::mkldnn_convolution' in names else 'slow'


def conv_case(seed, n, c_in, h, w, c_out, k, stride, padding, bias, x_grad):
    case = {'seed': seed, 'n': n, 'c_in': c_in, 'h': h, 'w': w, 'c_out': c_out, 'kernel': k, 'stride': stride,
            'padding': padding, 'bias': bias, 'grad_x': x_grad}
    for mkldnn in (True, False):
        torch.manual_seed(seed)
        conv = nn.Conv2d(c_in, c_out, k, stride=stride, padding=padding, bias=bias)
        x = torch.randn(n, c_in, h, w).requires_grad_(x_grad)
        out = {}
        with torch.backends.mkldnn.flags(enabled=mkldnn):
            def run():
                y = conv(x)
                y.backward(torch.randn(y.shape))
                out['y'] = y
            path = backend(run)
        r = {'path': path, 'y': f32(out['y']), 'grad_w': f32(conv.weight.grad)}
        if x_grad:
            r['grad_x'] = f32(x.grad)
        if bias:
            r['grad_b'] = f32(conv.bias.grad)
        if mkldnn:
            case['weight'] = f32(conv.weight)
            case['bias_values'] = f32(conv.bias) if bias else []
            case['default'] = r
        elif case['default']['path'] == 'onednn' and n <= 7:  # slow_conv2d where torch would not take it
            case['mkldnn_off'] = r
    return case


def dispatch_case(n, c_in, h, w, c_out, k, stride, padding):
    conv = nn.Conv2d(c_in, c_out, k, stride=stride, padding=padding)
    x = torch.randn(n, c_in, h, w, requires_grad=True)
    path = backend(lambda: conv(x).sum().backward())
    return {'n': n, 'c_in': c_in, 'h': h, 'w': w, 'c_out': c_out, 'kernel': k, 'stride': stride, 'padding': padding,
            'bias': True, 'path': path}


def pool_input(n, c, h, w, nan_at, neg_inf_at):
    x = torch.randn(n, c, h, w)
    r = torch.round(x * 2) / 2
    x = torch.where(r > 0, r, torch.zeros(()))  # ties and +0s, as after a ReLU (clamp_min could leave a -0)
    flat = x.view(-1)
    flat[nan_at] = float('nan')
    flat[neg_inf_at] = float('-inf')
    return x


def pool_case(seed, n, c, h, w, k, stride, padding, nan_at, neg_inf_at):
    torch.manual_seed(seed)
    x = pool_input(n, c, h, w, nan_at, neg_inf_at).requires_grad_()
    pool = nn.MaxPool2d(k, stride=stride, padding=padding)
    y = pool(x)
    y.backward(torch.randn(y.shape))
    _, idx = F.max_pool2d(x.detach(), k, stride=stride, padding=padding, return_indices=True)
    return {'seed': seed, 'n': n, 'c': c, 'h': h, 'w': w, 'kernel': k, 'stride': stride, 'padding': padding,
            'nan_at': nan_at, 'neg_inf_at': neg_inf_at, 'y': f32(y), 'indices': idx.flatten().tolist(),
            'grad_x': f32(x.grad)}


def init_sequence():
    """Two convolutions built one after the other draw from one stream (the digits CNN's)."""
    torch.manual_seed(31337)
    c1 = nn.Conv2d(1, 8, 3, padding=1)
    c2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
    c3 = nn.Conv2d(16, 4, 1)
    return {'seed': 31337, 'params': [f32(c1.weight), f32(c1.bias), f32(c2.weight), f32(c3.weight), f32(c3.bias)]}


def write(path, doc):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would follow the file into the tree
    os.replace(tmp, path)
    print('wrote', os.path.relpath(path, ROOT))


def main():
    conv = {'torch_version': torch.__version__,
            'cases': [conv_case(100 + i, *c) for i, c in enumerate(CONV_CASES)], 'init_sequence': init_sequence(),
            'dispatch': [dispatch_case(*c) for c in DISPATCH_CASES]}
    pool = {'torch_version': torch.__version__, 'cases': [pool_case(200 + i, *c) for i, c in enumerate(POOL_CASES)]}
    if LIVE:
        write(sys.argv[2], {'conv2d': conv, 'maxpool2d': pool})
    else:
        write(os.path.join(HERE, 'conv2d.json'), conv)
        write(os.path.join(HERE, 'maxpool2d.json'), pool)


if __name__ == '__main__':
    main()
