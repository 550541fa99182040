#!/usr/bin/python3
"""Writes the goldens of models beyond the MLP (issue 16: the CNN on the digits, BatchNorm's buffers, Dropout)
from real torch DistributedDataParallel. Run from the repository root:

    /usr/bin/python3 tests/golden/models/make_model_goldens.py [NAME ...]   # all, or only the configs named

Each config runs sim/ddp_reference.py (gloo on CPU, one process per rank, one thread each) and writes
tests/golden/models/<name>.json (parameters, buffers, losses, sampler indices and correct test predictions
per rank), plus configs.json (name -> argument list). Nothing here is hand-edited.
"""
import json
import gzip
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
REF = os.path.join(ROOT, 'sim', 'ddp_reference.py')

# The kernels the goldens are computed with (as tests/golden/ddp/make_ddp_goldens.py pins them), plus oneDNN's
# instruction set: its convolution kernels round differently per ISA. tests/BUILD pins the same for ddp_sim.
os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2',
                  ONEDNN_MAX_CPU_ISA='AVX2')

CNN = ['--dataset', 'digits', '--model', 'cnn', '--loss', 'ce', '--batch-size', '32', '--epochs', '1']
CONFIGS = {
    'cnn_sgd_ws2': ['--world-size', '2', '--lr', '0.05', '--momentum', '0.9'] + CNN,
    'cnn_sgd_ws3': ['--world-size', '3', '--lr', '0.05', '--momentum', '0.9'] + CNN,
    'cnn_adam_ws4': ['--world-size', '4', '--optimizer', 'adam', '--lr', '0.002'] + CNN,
    'cnn_no_broadcast_buffers_ws3': ['--world-size', '3', '--lr', '0.05', '--momentum', '0.9',
                                     '--broadcast-buffers', 'false'] + CNN,
    'cnn_seed_per_rank_ws2': ['--world-size', '2', '--lr', '0.05', '--seed-per-rank', 'true'] + CNN,
    'mlp_digits_ws2': ['--world-size', '2', '--dataset', 'digits', '--layers', '64,32,10', '--activation', 'relu',
                       '--loss', 'ce', '--lr', '0.1', '--batch-size', '16', '--epochs', '1'],
    # nn.LayerNorm as a --model spec layer (issue 17), at a world size where the ring's order matters.
    'layernorm_digits_ws3': ['--world-size', '3', '--dataset', 'digits', '--model',
                             'flatten,linear(64,32),layernorm(32),gelu,linear(32,10)', '--loss', 'ce',
                             '--optimizer', 'adam', '--lr', '0.01', '--batch-size', '16', '--epochs', '1'],
}
# torch.distributed.optim.ZeroRedundancyOptimizer (issue 18): the MLP and the CNN, SGD with momentum and Adam, world
# sizes 2 and 3; the dumps add "zero": the partition (names per rank) and each rank's optimizer-state floats.
ZERO_MLP = ['--layers', '32,64,64,10', '--activation', 'relu', '--samples', '48', '--batch-size', '8']
ZERO_CNN = CNN[:-4] + ['--batch-size', '64', '--epochs', '1']
for ws in ('2', '3'):
    for model, common in (('mlp', ZERO_MLP), ('cnn', ZERO_CNN)):
        CONFIGS[f'zero_{model}_sgd_ws{ws}'] = (['--world-size', ws, '--zero', 'true', '--lr', '0.05', '--momentum', '0.9']
                                              + common)
        CONFIGS[f'zero_{model}_adam_ws{ws}'] = (['--world-size', ws, '--zero', 'true', '--optimizer', 'adam', '--lr',
                                                 '0.002'] + common)


def write_json(path, doc):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def compress_if_large(path, limit=4 << 20):
    """A golden over `limit` bytes is stored as PATH.gz (no name, no time: the same bytes every run), which the
    tests' load_json reads in its place: the checkout must travel to a GPU machine in under 64 MiB."""
    if os.path.exists(path + '.gz'):
        os.remove(path + '.gz')
    if os.path.getsize(path) <= limit:
        return path
    with open(path, 'rb') as f, open(path + '.gz.tmp', 'wb') as raw:
        with gzip.GzipFile(filename='', mode='wb', compresslevel=9, fileobj=raw, mtime=0) as z:
            z.write(f.read())
    os.chmod(path + '.gz.tmp', 0o644)
    os.replace(path + '.gz.tmp', path + '.gz')
    os.remove(path)
    return path + '.gz'


def write_goldens(here, configs, only):
    """Runs sim/ddp_reference.py for every config (or only those named) into here/<name>.json, and configs.json."""
    t0 = time.monotonic()
    for name, args in configs.items():
        if only and name not in only:
            continue
        out = os.path.join(here, name + '.json')
        t = time.monotonic()
        subprocess.run([sys.executable, REF] + args + ['--dump-params', out], check=True, stdout=subprocess.DEVNULL,
                       timeout=900)
        os.chmod(out, 0o644)
        out = compress_if_large(out)
        print(f'wrote {os.path.relpath(out, ROOT)} ({time.monotonic() - t:.1f}s)', flush=True)
    write_json(os.path.join(here, 'configs.json'), configs)
    print(f'wrote configs.json; total {time.monotonic() - t0:.1f}s')


def main():
    write_goldens(HERE, CONFIGS, sys.argv[1:])  # names to (re)write; all when none


if __name__ == '__main__':
    sys.exit(main())
