#!/usr/bin/python3
"""Goldens for ddplab's 16-bit values (src/collective/half.h) and 16-bit all-reduces, from Debian's torch 1.13.
Run from the repository root (about a minute):

    /usr/bin/python3 tests/golden/half/make_half_goldens.py

Writes, atomically:
  conversions.json: float32 -> float16 and -> bfloat16 (tensor.to(dtype)), float16 / bfloat16 -> float32, and
    float16 / bfloat16 tensors .div_(ws) for ws 2..8 (what fp16_compress_hook does before its all-reduce), on a few
    thousand chosen values: normals, subnormals, exact ties and their neighbours, overflow to inf, NaN.
  gloo_fp16.json: dist.all_reduce(SUM) of float16 tensors over real Gloo (one process per rank, init file://) at
    ws 2, 3, 4 for n = 1003 and n = 4,500,007 (8.6 MiB: more segments than 2 * ws). Inputs are
    (torch.randn(n, generator=Generator().manual_seed(seed)) * scale).half(), redrawn by the C++ test with
    ddplab's generator (input digests recorded to prove it); outputs: every element for 1003, an FNV-1a digest of
    all elements plus 4,000 sampled elements for the big size. Also the error Gloo raises for bfloat16.
Bits are integers (float32 as uint32, 16-bit types as uint16). Kernels pinned as tests/golden/make_goldens.py pins
them (set before importing torch).
"""
import datetime
import json
import os
import shutil
import struct
import tempfile

os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2')
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))
BIG = 4_500_007
SCALES = [8.0, 1.0, 32.0, 0.25]  # per rank, powers of two (exact): the ranks' magnitudes differ


def write(name, doc):
    fd, tmp = tempfile.mkstemp(dir=HERE, prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(HERE, name))
    print('wrote', os.path.join('tests/golden/half', name))


def f32_from_bits(bits):
    return torch.from_numpy(np.array(bits, dtype=np.uint32).view(np.float32).copy())


def bits16(t):
    return [int(v) & 0xFFFF for v in t.contiguous().view(torch.int16).tolist()]


def bits32(t):
    return [int(v) & 0xFFFFFFFF for v in t.contiguous().view(torch.int32).tolist()]


def from_bits16(bits, dtype):
    return torch.from_numpy(np.array(bits, dtype=np.uint16).view(np.int16).copy()).view(dtype)


def chosen_floats(rng):
    """float32 bit patterns: specials, float16 and bfloat16 boundaries, ties between neighbouring 16-bit values and
    the floats either side of each tie, random values over float16's range and beyond."""
    f = lambda x: struct.unpack('<I', struct.pack('<f', x))[0]
    out = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA00000, 0xFFFFFFFF,
           0x7FFFFFFF, 0x00000001, 0x007FFFFF, 0x00800000, 0x80000001, 0x7F7FFFFF, 0xFF7FFFFF]
    for x in [65504.0, 65505.0, 65519.0, 65520.0, 65536.0, 1e5, 6.103515625e-05, 5.9604644775390625e-08,
              2.98023223876953125e-08, 4.4703483581542969e-08, 1.0, 2048.0, 2049.0, 2051.0, 3.0e38]:
        for s in (1, -1):
            b = f(s * x)
            out += [b - 1, b, b + 1]
    # ties: the float midway between float16 neighbours h and h+1 (exact in float32) and its float neighbours
    for hb in rng.integers(0, 0x7BFF, 600).tolist() + list(range(0, 40)) + list(range(0x3FF, 0x410)):
        lo = np.array([hb], dtype=np.uint16).view(np.float16)[0].astype(np.float32)
        hi = np.array([hb + 1], dtype=np.uint16).view(np.float16)[0].astype(np.float32)
        mid = np.float32((np.float64(lo) + np.float64(hi)) / 2)
        b = int(np.array([mid], dtype=np.float32).view(np.uint32)[0])
        sign = 0x80000000 if hb % 3 == 0 else 0
        out += [sign | (b - 1), sign | b, sign | (b + 1)]
    # bfloat16 ties: low 16 bits exactly 0x8000, either side
    for hi16 in rng.integers(0, 0x7F7F, 300).tolist():
        b = (hi16 << 16) | 0x8000
        out += [b - 1, b, b + 1]
    # random floats: exponents from float16's subnormals to beyond its range, and anywhere
    for _ in range(800):
        e = int(rng.integers(127 - 27, 127 + 18))
        out.append((int(rng.integers(0, 2)) << 31) | (e << 23) | int(rng.integers(0, 1 << 23)))
    out += rng.integers(0, 1 << 32, 300, dtype=np.uint64).tolist()
    return [int(v) & 0xFFFFFFFF for v in out]


def chosen_16(rng):
    """16-bit patterns: every 17th one, the neighbourhoods of zero, the subnormal/normal boundary, inf and NaN."""
    out = list(range(0, 1 << 16, 17))
    for c in (0, 0x3FF, 0x400, 0x7BFF, 0x7C00, 0x7E00, 0x7F7F, 0x7F80, 0x7FC0, 0x3C00, 0x3F80):
        for d in range(-3, 4):
            out += [(c + d) & 0xFFFF, (c + d + 0x8000) & 0xFFFF]
    return out


def conversions():
    rng = np.random.default_rng(18)
    fl = chosen_floats(rng)
    x = f32_from_bits(fl)
    doc = {'torch_version': torch.__version__, 'float_bits': fl,
           'to_half': bits16(x.to(torch.float16)), 'to_bfloat16': bits16(x.to(torch.bfloat16))}
    h16 = chosen_16(rng)
    doc['bits16'] = h16
    doc['half_to_float'] = bits32(from_bits16(h16, torch.float16).to(torch.float32))
    doc['bfloat16_to_float'] = bits32(from_bits16(h16, torch.bfloat16).to(torch.float32))
    # division by the world size: finite values over the whole range (subnormals included), per ws
    finite_h = [b for b in rng.integers(0, 1 << 16, 3000).tolist() if (b & 0x7C00) != 0x7C00][:2000]
    finite_b = [b for b in rng.integers(0, 1 << 16, 3000).tolist() if (b & 0x7F80) != 0x7F80][:2000]
    finite_h += list(range(0, 64)) + [0x7BFF, 0xFBFF, 0x0400, 0x0401]
    doc['div_half_in'], doc['div_bfloat16_in'], doc['div'] = finite_h, finite_b, []
    for ws in range(2, 9):
        h = from_bits16(finite_h, torch.float16)
        b = from_bits16(finite_b, torch.bfloat16)
        doc['div'].append({'ws': ws, 'half_out': bits16(h.clone().div_(ws)), 'bfloat16_out': bits16(b.clone().div_(ws))})
    write('conversions.json', doc)


def fnv1a(t):
    """64-bit FNV-1a over the little-endian bytes of a 16-bit tensor (as src/base/io.h's fnv1a_bits does for floats)."""
    h, mask = 0xcbf29ce484222325, 0xFFFFFFFFFFFFFFFF
    for byte in t.contiguous().view(torch.int16).numpy().astype('<i2').tobytes():
        h = ((h ^ byte) * 0x100000001b3) & mask
    return h


def seed_of(ws, n, rank):
    return 18_000 + 100 * ws + 10 * rank + (1 if n > 10_000 else 0)


def inputs(ws, n, rank):
    g = torch.Generator().manual_seed(seed_of(ws, n, rank))
    return (torch.randn(n, generator=g) * SCALES[rank]).half()


def worker(rank, ws, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method='file://' + init_file, rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=120))
    res = {}
    for n in (1003, BIG):
        t = inputs(ws, n, rank)
        dist.all_reduce(t)  # SUM
        res[n] = t
    try:
        dist.all_reduce(torch.ones(4, dtype=torch.bfloat16))
        res['bf16'] = 'no error'
    except Exception as e:
        res['bf16'] = f'{type(e).__name__}: {str(e).splitlines()[0]}'
    torch.save(res, os.path.join(out_dir, f'rank{rank}.pt'))
    dist.destroy_process_group()


def gloo_fp16():
    doc = {'torch_version': torch.__version__, 'scales': SCALES, 'cases': []}
    for ws in (2, 3, 4):
        d = tempfile.mkdtemp(prefix='half_goldens.')
        try:
            mp.spawn(worker, args=(ws, os.path.join(d, 'init'), d), nprocs=ws, join=True)
            res = [torch.load(os.path.join(d, f'rank{r}.pt')) for r in range(ws)]
        finally:
            shutil.rmtree(d, ignore_errors=True)
        doc['bfloat16_error'] = res[0]['bf16']
        for n in (1003, BIG):
            out = res[0][n]
            assert all(torch.equal(res[r][n].view(torch.int16), out.view(torch.int16)) for r in range(ws))
            assert bool(torch.isfinite(out).all())
            case = {'ws': ws, 'n': n, 'seeds': [seed_of(ws, n, r) for r in range(ws)],
                    'input_fnv1a': [str(fnv1a(inputs(ws, n, r))) for r in range(ws)],
                    'output_fnv1a': str(fnv1a(out))}
            if n < 10_000:
                case['output'] = bits16(out)
            else:
                idx = sorted(set(np.random.default_rng(ws).integers(0, n, 4000).tolist()))
                case['sample_index'] = idx
                case['sample_output'] = bits16(out[idx])
            doc['cases'].append(case)
            print(f'ws {ws} n {n}: all ranks equal, finite')
    write('gloo_fp16.json', doc)


if __name__ == '__main__':
    conversions()
    gloo_fp16()
