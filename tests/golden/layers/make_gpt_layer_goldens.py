#!/usr/bin/python3
"""Writes the PyTorch goldens for //tests:gpt_layers_test (LayerNorm and Embedding, forward and backward, as
nanoGPT uses them). Run from the repository root with Debian's python3-torch (1.13):

    /usr/bin/python3 tests/golden/layers/make_gpt_layer_goldens.py

It writes tests/golden/layers/gpt_layers.json. `--out FILE --seed S` writes the same cases from other random
values elsewhere (the test's live check); `--big` adds larger shapes (more rows, wider rows). Floats are
printed with 9 significant digits (they read back to the same float32). Nothing in the output is hand-edited.
"""
import argparse
import json
import os
import tempfile

# Kernels pinned before torch loads, as tests/golden/make_goldens.py pins them: ATen's AVX2 kernels (8 lanes,
# the ones ddplab reproduces), one OpenBLAS thread on Prescott kernels.
os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2')
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))
EPS = 1e-5  # nanoGPT's LayerNorm: F.layer_norm(x, weight.shape, weight, bias, 1e-5)


def f32(t):
    return [float('%.9g' % v) for v in t.detach().flatten().tolist()]


# Row widths: below one 8-lane vector (5), with a scalar tail (13, 130), whole vectors (8 .. 128: one Welford
# chunk of up to 16 vectors), and past one chunk, where RowwiseMoments cascades chunks (264: 3 chunks, a stack
# 2 deep; 296: 3 chunks, the last of 5 vectors; 777: 7 chunks and a tail; 2100: 17 chunks, a stack 5 deep).
WIDTHS = (5, 8, 13, 16, 32, 48, 128, 130, 264, 296)
ROWS = (1, 3, 17)
# Which affine parameters: weight and bias (nanoGPT bias=True), weight only (bias=False), neither, bias only.
AFFINE = ('weight_bias', 'weight', 'none', 'bias')


def layer_norm_cases(g, big):
    shapes = [(M, C) for C in WIDTHS for M in ROWS if M < 17 or C < 128]  # (the file's size)
    shapes += [(64, 128), (64, 13), (8, 130), (8, 296)]
    if big:  # GPT batches (B*T rows of n_embd) and wider rows
        shapes += [(256, 128), (300, 48), (300, 13), (200, 264), (1, 777), (5, 777), (1, 2100), (5, 2100)]
    cases = []
    for i, (M, C) in enumerate(shapes):
        affine = AFFINE[i % len(AFFINE)] if i % 8 else 'weight_bias'
        scale, shift = ((1.0, 0.0), (0.02, 0.0), (5.0, 3.0), (1.0, -40.0))[i % 4]
        x = torch.randn(M, C, generator=g) * scale + shift
        if i % 3 == 1:  # a trend along the row: the chunks' and lanes' means differ, so their merges matter
            x = x + torch.linspace(-3 * scale, 3 * scale, C) * torch.rand(M, 1, generator=g)
        x.requires_grad_()
        dy = torch.randn(M, C, generator=g)
        init = i % 3 == 0  # LayerNorm's reset_parameters: ones and zeros
        w = (torch.ones(C) if init else torch.randn(C, generator=g)).requires_grad_()
        b = (torch.zeros(C) if init else torch.randn(C, generator=g)).requires_grad_()
        weight = w if affine in ('weight_bias', 'weight') else None
        bias = b if affine in ('weight_bias', 'bias') else None
        y = F.layer_norm(x, (C,), weight, bias, EPS)
        y.backward(dy)
        _, mean, rstd = torch.native_layer_norm(x.detach(), [C], weight, bias, EPS)
        case = {'M': M, 'C': C, 'affine': affine, 'x': f32(x), 'grad_y': f32(dy), 'y': f32(y), 'mean': f32(mean),
                'rstd': f32(rstd), 'grad_x': f32(x.grad)}
        if weight is not None:
            case.update({'weight': f32(w), 'grad_weight': f32(w.grad)})
        if bias is not None:
            case.update({'bias': f32(b), 'grad_bias': f32(b.grad)})
        cases.append(case)
    return cases


def moments_cases(g, big):
    """Rows whose chunks' means differ (a trend), 37 vectors wide: RowwiseMoments merges two full chunks into
    a stack holding the last 5-vector chunk, the one merge whose products are inexact (m0 = 5): about 1 row
    in 25 shows it in rstd. Only x, mean and rstd are kept (the file's size)."""
    cases = []
    for M, C in [(96, 296)] + ([(400, 296), (400, 312)] if big else []):
        x = torch.randn(M, C, generator=g) + torch.linspace(-10, 10, C) * torch.rand(M, 1, generator=g)
        _, mean, rstd = torch.native_layer_norm(x, [C], None, None, EPS)
        cases.append({'M': M, 'C': C, 'x': f32(x), 'mean': f32(mean), 'rstd': f32(rstd)})
    return cases


def embedding_cases(g, big):
    # (vocab, dim, index shape): small vocabularies repeat tokens many times within a batch, so the backward's
    # order of adding repeated rows shows; 4 * 300 indices take the numel > 1000 branch of the backward.
    shapes = [(10, 16, (4, 16)), (3, 13, (4, 16)), (65, 32, (4, 32)), (65, 48, (2, 5)), (7, 5, (1,)),
              (11, 5, (4, 300))]
    if big:
        shapes += [(64, 128, (4, 64)), (65, 128, (12, 64)), (2, 33, (16, 16))]
    cases = []
    for V, D, idx_shape in shapes:
        weight = torch.randn(V, D, generator=g).requires_grad_()
        idx = torch.randint(0, V, idx_shape, generator=g)
        dout = torch.randn(*idx_shape, D, generator=g)
        out = F.embedding(idx, weight)
        out.backward(dout)
        cases.append({'num_embeddings': V, 'dim': D, 'idx': idx.flatten().tolist(), 'weight': f32(weight),
                      'grad_out': f32(dout), 'out': f32(out), 'grad_weight': f32(weight.grad)})
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=os.path.join(HERE, 'gpt_layers.json'))
    ap.add_argument('--seed', type=int, default=17)
    ap.add_argument('--big', action='store_true')
    args = ap.parse_args()
    g = torch.Generator().manual_seed(args.seed)
    doc = {'torch_version': torch.__version__,
           'command': '/usr/bin/python3 tests/golden/layers/make_gpt_layer_goldens.py', 'eps': EPS,
           'layer_norm': layer_norm_cases(g, args.big), 'layer_norm_moments': moments_cases(g, args.big),
           'embedding': embedding_cases(g, args.big)}
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.out)), prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    os.chmod(tmp, 0o644)
    os.replace(tmp, args.out)
    print('wrote', args.out)


if __name__ == '__main__':
    main()
