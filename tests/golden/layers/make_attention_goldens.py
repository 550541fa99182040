#!/usr/bin/python3
"""Writes the PyTorch goldens for //tests:attention_test: nanoGPT's causal self-attention core (between c_attn's
output and c_proj's input) as torch 1.13 runs it on CPU, forward and backward. Run from the repository root
with Debian's python3-torch (1.13):

    /usr/bin/python3 tests/golden/layers/make_attention_goldens.py

It writes tests/golden/layers/attention.json. `--out FILE --seed S` writes the same cases from other random
values elsewhere (the test's live check). Each case: B, T, C, n_head, block_size, dropout p, training, the seed
given to torch.manual_seed just before the forward (the dropout mask's generator), the inputs qkv [B, T, 3C]
(a leaf that requires grad) and dy [B, T, C], torch's y, qkv.grad, and the next int64 random_() of the global
generator after the forward (to check how much the dropout drew). Floats are printed with 9 significant digits
(they read back to the same float32). Nothing in the output is hand-edited.
"""
import argparse
import json
import math
import os
import tempfile

# Kernels pinned before torch loads, as tests/golden/make_goldens.py pins them: ATen's AVX2 kernels, one
# OpenBLAS thread on Prescott kernels.
os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2')
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))


def f32(t):
    return [float('%.9g' % v) for v in t.detach().flatten().tolist()]


class Core(nn.Module):
    """nanoGPT's CausalSelfAttention.forward (model.py, the path without flash attention) minus c_attn, c_proj
    and resid_dropout."""

    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.attn_dropout = nn.Dropout(dropout)
        self.register_buffer('bias', torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, qkv):
        B, T, C = qkv.size()[0], qkv.size()[1], self.n_embd
        q, k, v = qkv.split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, C)


# (B, T, C, n_head): per batch item the four products each do T*T*hs multiply-adds; bmm loops naively below
# 400 and calls sgemm from 400 on, so the list has both sides (5*5*16 = 400 exactly; 5*5*12 = 300). B == 1 or
# n_head == 1 make the reshapes for bmm views of qkv (transposed operands reach sgemm as flags); otherwise
# they are copies.
SHAPES = [(1, 1, 16, 1), (2, 1, 16, 4), (1, 2, 16, 2), (3, 3, 48, 4), (2, 4, 32, 2), (1, 5, 48, 4), (2, 5, 64, 4),
          (1, 5, 16, 1), (4, 5, 48, 2), (1, 7, 64, 1), (2, 8, 48, 1), (3, 8, 16, 2), (1, 9, 32, 4), (2, 9, 48, 2),
          (1, 12, 48, 4), (4, 12, 16, 1), (1, 13, 64, 2), (1, 16, 64, 4), (2, 16, 48, 4), (3, 16, 16, 4),
          (1, 16, 48, 1), (2, 16, 32, 1), (4, 16, 64, 2)]
BLOCK = 16


def cases(seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, (B, T, C, nh) in enumerate(SHAPES):
        for p, training in ((0.0, True), (0.1, True), (0.1, False)):
            big = B * T * C > 1024
            if (p > 0 and big) or (not training and i % 4):
                continue  # file size: dropout on the smaller shapes
            scale = (1.0, 3.0)[i % 2]
            qkv = (torch.randn(B, T, 3 * C, generator=g) * scale).requires_grad_()
            dy = torch.randn(B, T, C, generator=g)
            core = Core(C, nh, BLOCK, p)
            core.train(training)
            dseed = 1000 + 17 * i + int(p * 10)
            torch.manual_seed(dseed)
            y = core(qkv)
            after = int(torch.empty((), dtype=torch.int64).random_())
            y.backward(dy)
            out.append({'B': B, 'T': T, 'C': C, 'n_head': nh, 'block_size': BLOCK, 'dropout': p,
                        'training': training, 'seed': dseed, 'qkv': f32(qkv), 'dy': f32(dy), 'y': f32(y),
                        'dqkv': f32(qkv.grad), 'next_int64': after})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', default=os.path.join(HERE, 'attention.json'))
    ap.add_argument('--seed', type=int, default=17)
    args = ap.parse_args()
    doc = {'torch': torch.__version__, 'command': '/usr/bin/python3 tests/golden/layers/make_attention_goldens.py'
           + ('' if args.seed == 17 else ' --seed %d' % args.seed), 'cases': cases(args.seed)}
    # Atomic: a temporary file in the target's directory, renamed over it.
    d = os.path.dirname(os.path.abspath(args.out))
    fd, tmp = tempfile.mkstemp(dir=d, suffix='.tmp')
    os.chmod(tmp, 0o644)
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    os.replace(tmp, args.out)
    print('wrote %s: %d cases' % (args.out, len(doc['cases'])))


if __name__ == '__main__':
    main()
