#!/usr/bin/python3
"""Goldens for the tiny GPT's training pieces, from Debian's python3-torch 1.13 on CPU, one thread.
Run from the repository root:

    /usr/bin/python3 tests/golden/gpt_train/make_gpt_train_goldens.py

It writes, beside itself:
  randint.json    torch.randint(high, (n,)) after manual_seed, highs on both sides of 2^28 and 2^32;
  text_data.json  nanoGPT's byte-level data (vocabulary, 90/10 split) and get_batch draws, for Debian's
                  GPL-3 text and for a synthetic byte string given in the file;
  adamw.json      torch.optim.AdamW (single-tensor path) with nanoGPT's two parameter groups over several
                  steps, one parameter without a grad on some steps;
  clip_grad.json  torch.nn.utils.clip_grad_norm_ over gradient sets of several sizes (redrawn by the test
                  from the same seed with torch.randn), norms above and below max_norm; torch.norm(x, 2) of
                  randn vectors of every length 1..40 (each tail length) and larger ones.
Floats are float32 printed with 9 significant digits (they read back to the same float32).
"""
import hashlib
import json
import os
import struct
import tempfile

# Kernels pinned before torch loads, as tests/golden/make_goldens.py pins them (see tests/golden/README.md).
os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2')
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
GPL3 = '/usr/share/common-licenses/GPL-3'
torch.set_num_threads(1)


def f32(t):
    return [float('%.9g' % v) for v in t.detach().flatten().tolist()]


def fnv1a(t):
    """FNV-1a 64 over the float32 bytes (little endian), as hex: a large tensor's bits in 16 characters."""
    h = 0xcbf29ce484222325
    for b in t.detach().contiguous().numpy().tobytes():
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return '%016x' % h


def write(name, doc):
    path = os.path.join(HERE, name)
    fd, tmp = tempfile.mkstemp(dir=HERE, prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    print('wrote', os.path.relpath(path, ROOT))


def randint():
    highs = [1, 2, 3, 10, 65, 31634, 2**28 - 1, 2**28, 2**28 + 1, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 10**12,
             2**62 + 12345, 2**63 - 1]
    cases = []
    for seed in [0, 1337, 2**32 + 5]:
        for high in highs:
            torch.manual_seed(seed)
            first = torch.randint(high, (7,))
            second = torch.randint(high, (3,))  # the stream continues
            cases.append({'seed': seed, 'high': high, 'values': first.tolist() + second.tolist()})
            assert first.dtype == torch.int64
    write('randint.json', {'torch_version': torch.__version__, 'cases': cases})


def text_case(name, data, draws):
    """nanoGPT's prepare + get_batch on bytes `data`; draws: (seed, [(split, batch, block), ...])."""
    vocab = sorted(set(data))
    stoi = {b: i for i, b in enumerate(vocab)}
    tokens = torch.tensor([stoi[b] for b in data], dtype=torch.long)
    n = len(tokens)
    train, val = tokens[:int(n * 0.9)], tokens[int(n * 0.9):]
    runs = []
    for seed, calls in draws:
        torch.manual_seed(seed)
        out = []
        for split, batch_size, block_size in calls:
            d = train if split == 'train' else val
            ix = torch.randint(len(d) - block_size, (batch_size,))
            x = torch.stack([d[i:i + block_size] for i in ix])
            y = torch.stack([d[i + 1:i + 1 + block_size] for i in ix])
            out.append({'split': split, 'batch_size': batch_size, 'block_size': block_size, 'ix': ix.tolist(),
                        'x': x.tolist(), 'y': y.tolist()})
        runs.append({'seed': seed, 'calls': out})
    return {'name': name, 'n': n, 'vocab': vocab, 'n_train': len(train), 'n_val': len(val),
            'train_sum': int(train.sum()), 'val_sum': int(val.sum()),
            'train_head': train[:32].tolist(), 'val_head': val[:32].tolist(), 'val_tail': val[-32:].tolist(),
            'decoded_val_head': bytes(vocab[t] for t in val[:32].tolist()).hex(), 'runs': runs}


def text_data():
    with open(GPL3, 'rb') as f:
        gpl = f.read()
    gpl_draws = [(1337, [('train', 4, 8), ('val', 4, 8), ('train', 2, 64), ('train', 12, 16)]),
                 (0, [('val', 3, 256), ('train', 1, 1)])]
    # Every byte value (0 and 255 included) and a repeat, so the vocabulary is not just ASCII; 41 bytes:
    # int(41 * 0.9) = 36, val = 5 tokens, so block 4 is the longest get_batch accepts.
    synthetic = bytes([0, 255, 10, 128, 65, 66, 65, 200, 7, 7, 3]) * 3 + b'hello world'[:8]
    syn_draws = [(5, [('train', 3, 4), ('val', 2, 4), ('val', 5, 1)])]
    write('text_data.json', {
        'torch_version': torch.__version__,
        'gpl3': dict(text_case('gpl3', gpl, gpl_draws), path=GPL3, sha256=hashlib.sha256(gpl).hexdigest()),
        'synthetic': dict(text_case('synthetic', synthetic, syn_draws), bytes_hex=synthetic.hex())})


def adamw():
    """nanoGPT's optimizer: AdamW([{decay: dim >= 2, weight_decay}, {no decay: dim < 2, 0}], lr, betas, eps).
    Parameters named as a tiny model's; 'aux.weight' gets no grad (p.grad = None) on the steps in no_grad."""
    shapes = [('wte.weight', (11, 4)), ('ln.weight', (4,)), ('ln.bias', (4,)), ('fc.weight', (37, 4)),
              ('fc.bias', (37,)), ('aux.weight', (11, 4)), ('head.bias', (3,))]
    configs = [dict(lr=6e-4, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8, steps=6, no_grad=[0, 3]),
               dict(lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8, steps=6, no_grad=[1, 2, 5]),
               # other scalars, so each rounding (1 - lr*wd, lr/bias_correction1, ...) is exercised
               dict(lr=0.0123, weight_decay=0.37, betas=(0.8, 0.999), eps=1e-6, steps=4, no_grad=[]),
               # float(1 - lr*wd) = 0.91f, not 1 - float(lr)*float(wd) = 0.90999997f: the decay factor is one
               # double rounded to float
               dict(lr=0.3, weight_decay=0.3, betas=(0.9, 0.95), eps=1e-8, steps=3, no_grad=[1]),
               # a per-group lr (the no-decay group's own)
               dict(lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8, steps=3, no_grad=[0],
                    no_decay_lr=7e-4)]
    cases = []
    for k, cfg in enumerate(configs):
        torch.manual_seed(100 + k)
        params = {n: torch.nn.Parameter(torch.randn(*s)) for n, s in shapes}
        init = {n: f32(p) for n, p in params.items()}
        decay = [n for n, p in params.items() if p.dim() >= 2]
        no_decay = [n for n, p in params.items() if p.dim() < 2]
        no_decay_group = {'params': [params[n] for n in no_decay], 'weight_decay': 0.0}
        if 'no_decay_lr' in cfg:
            no_decay_group['lr'] = cfg['no_decay_lr']
        opt = torch.optim.AdamW([{'params': [params[n] for n in decay], 'weight_decay': cfg['weight_decay']},
                                 no_decay_group], lr=cfg['lr'], betas=cfg['betas'], eps=cfg['eps'])
        steps = []
        for s in range(cfg['steps']):
            grads = {}
            for n, p in params.items():
                if n == 'aux.weight' and s in cfg['no_grad']:
                    p.grad = None
                    grads[n] = None
                else:
                    p.grad = torch.randn(p.shape) * 0.5
                    grads[n] = f32(p.grad)
            opt.step()
            steps.append({'grads': grads, 'after': {n: f32(p) for n, p in params.items()}})
        assert opt.defaults['foreach'] is None and not opt.defaults['amsgrad'] and not opt.defaults['maximize']
        cases.append({'options': {k2: v for k2, v in cfg.items() if k2 not in ('steps', 'no_grad')},
                      'shapes': [[n, list(s)] for n, s in shapes], 'decay': decay, 'no_decay': no_decay,
                      'init': init, 'steps': steps})
    write('adamw.json', {'torch_version': torch.__version__, 'cases': cases})


def clip_grad():
    """Each case: manual_seed(seed), then per shape a grad = torch.randn(numel) * scale (None where the
    shape is null: a parameter without grad), clip_grad_norm_(params, max_norm)."""
    sets = [
        ('one small', [[3]], 0.3), ('n=7', [[7]], 0.5), ('n=8', [[8]], 0.7), ('n=9', [[9]], 100.0),
        ('n=16, 17, 23', [[16], [17], [23]], 1.0), ('matrix', [[5, 7]], 1.7),
        ('no grad skipped', [[4, 3], None, [12]], 1.0), ('norm below max', [[33], [6]], 1000.0),
        ('large', [[100003]], 1.0), ('large below', [[2, 50000], [31]], 1e6), ('large, max 3.3', [[4099]], 3.3),
        ('many grads (stack >= 8)', [[3, 4], [4], [4], [37, 4], [37], [4, 37], [4], [4], [4], [11, 4], [5]], 0.3),
        ('tiny grads', [[10], [3]], 1.0),
    ]
    cases = []
    for k, (name, shapes, max_norm) in enumerate(sets):
        for scale in ([1.0, 2.0**-14] if name == 'tiny grads' else [1.0]):
            seed = 500 + k
            torch.manual_seed(seed)
            params = []
            for s in shapes:
                p = torch.nn.Parameter(torch.zeros(s if s is not None else [2]))
                if s is not None:
                    p.grad = (torch.randn(p.numel()) * scale).view(s)
                params.append(p)
            norms = [f32(torch.norm(p.grad.detach(), 2))[0] if p.grad is not None else None for p in params]
            total = torch.nn.utils.clip_grad_norm_(params, max_norm)
            clipped = [None if p.grad is None else
                       ({'fnv1a': fnv1a(p.grad), 'head': f32(p.grad.flatten()[:16])} if p.grad.numel() > 1000
                        else {'values': f32(p.grad)}) for p in params]
            divided = torch.clamp(torch.tensor(max_norm, dtype=torch.float32) / (total + 1e-6), max=1.0)
            coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)  # what clip_grad_norm_ computed
            if bool(divided != coef):
                print('  %s: max_norm / (total + 1e-6) as one float division would give another coefficient'
                      % name)
            cases.append({'name': name, 'seed': seed, 'scale': scale, 'shapes': shapes, 'max_norm': max_norm,
                          'norms': norms, 'total_norm': f32(total)[0], 'clipped': clipped})
    # torch.norm(x, 2) alone, over every tail length: torch.randn(n) drawn in order after manual_seed(77),
    # `trials` draws per n.
    torch.manual_seed(77)
    norms = []
    for n in list(range(1, 41)) + [63, 64, 65, 100, 1001, 4099, 100003]:
        trials = 40 if n <= 100 else 4
        norms.append({'n': n, 'trials': trials, 'values': [f32(torch.norm(torch.randn(n), 2))[0]
                                                           for _ in range(trials)]})
    write('clip_grad.json', {'torch_version': torch.__version__, 'cases': cases, 'norm2_seed': 77, 'norm2': norms})


if __name__ == '__main__':
    randint()
    text_data()
    adamw()
    clip_grad()
