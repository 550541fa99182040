#!/usr/bin/python3
"""Writes the DDP goldens for //sim:ddp_sim from real torch DistributedDataParallel. Run from the repository root:

    /usr/bin/python3 tests/golden/ddp/make_ddp_goldens.py

Each config runs sim/ddp_reference.py (gloo on CPU, one process per rank) for world sizes 2, 3 and 4 and writes
tests/golden/ddp/<name>_ws<N>.json, plus configs.json (name -> argument list). Nothing here is hand-edited.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
REF = os.path.join(ROOT, 'sim', 'ddp_reference.py')

# The kernels the committed goldens were computed with, inherited by every sim/ddp_reference.py run below:
# OpenBLAS's Prescott kernels (SSE3: every x86-64 CPU since 2005 runs them; an AVX-512 CPU would pick SkylakeX
# and change the last bits of matrix products), one BLAS thread (threaded OpenBLAS adds in another order;
# assigned, so an exported value cannot leak in) and ATen's AVX2 kernels (any CPU with AVX2). The live checks
# in the tests deliberately do not pin: they compare ddplab and torch on the machine's own kernels.
os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2')

WORLD_SIZES = [2, 3, 4]
GRID = {
    'basic': ['--epochs', '2'],
    'toy_ce': ['--dataset', 'toy', '--layers', '2,30,20,2', '--activation', 'relu', '--loss', 'ce', '--lr', '0.5',
               '--batch-size', '2', '--epochs', '3', '--loader-drop-last', 'true', '--seed', '123'],
    'droplast_momentum': ['--samples', '37', '--drop-last', 'true', '--epochs', '3', '--momentum', '0.9',
                          '--lr', '0.05', '--batch-size', '4'],
    'nosync': ['--no-sync', '2', '--epochs', '2', '--batch-size', '4'],
    'adam': ['--optimizer', 'adam', '--lr', '0.02', '--layers', '8,16,4', '--activation', 'relu', '--epochs', '2'],
    # Several buckets need > 1 MiB of parameters (torch 1.13's first bucket is 1 MiB whatever bucket_cap_mb says): too
    # big for a golden file. tests/ddp_sim_test.cc checks that case live against this script instead.
    'short_batches': ['--samples', '50', '--batch-size', '5', '--epochs', '2', '--momentum', '0.5',
                      '--layers', '6,16,2', '--activation', 'relu', '--sampler-seed', '7'],
    'noshuffle_perrank': ['--shuffle', 'false', '--init', 'per-rank', '--epochs', '2'],
}


def write_json(path, doc):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    os.replace(tmp, path)


def main():
    t0 = time.monotonic()
    configs = {}
    for base, args in GRID.items():
        for ws in WORLD_SIZES:
            name = f'{base}_ws{ws}'
            full = ['--world-size', str(ws)] + args
            out = os.path.join(HERE, name + '.json')
            t = time.monotonic()
            subprocess.run([sys.executable, REF] + full + ['--dump-params', out], check=True,
                           stdout=subprocess.DEVNULL, timeout=900)
            configs[name] = full
            print(f'wrote {os.path.relpath(out, ROOT)} ({time.monotonic() - t:.1f}s)', flush=True)
    write_json(os.path.join(HERE, 'configs.json'), configs)
    print(f'wrote {os.path.relpath(os.path.join(HERE, "configs.json"), ROOT)}; total {time.monotonic() - t0:.1f}s')


if __name__ == '__main__':
    sys.exit(main())
