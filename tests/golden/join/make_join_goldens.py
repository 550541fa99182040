#!/usr/bin/python3
"""Writes the goldens of uneven inputs under torch.distributed.algorithms.Join (issue 18 item 3) from real torch
DistributedDataParallel on gloo. Run from the repository root:

    /usr/bin/python3 tests/golden/join/make_join_goldens.py [NAME ...]   # all, or only the configs named

Each config runs sim/ddp_reference.py with --uneven K --join true (rank r trains on the first B - K*r batches of
each epoch, inside `with Join([ddp], divide_by_initial_world_size=...)`, one Join per epoch) and writes
tests/golden/join/<name>.json (parameters, buffers, losses, sampler indices and correct test predictions per
rank), plus configs.json (name -> argument list). Without Join torch blocks in an all-reduce until the timeout:
there is no golden of that (README, "Uneven inputs and Join"). Nothing here is hand-edited.
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

# The kernels pinned as tests/golden/models/make_model_goldens.py pins them (oneDNN's ISA for the CNN's
# convolutions); tests/BUILD pins the same for the tests.
os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2',
                  ONEDNN_MAX_CPU_ISA='AVX2')

# MLP: 96 samples, batch 8: B = 6 batches per rank at ws 2, 4 at ws 3; two epochs (a Join per epoch, momentum
# carried over: a joined rank's momentum is not synchronised).
MLP = ['--layers', '8,32,16,4', '--activation', 'relu', '--samples', '96', '--batch-size', '8', '--lr', '0.05',
       '--momentum', '0.9', '--epochs', '2']
# CNN on the digits (BatchNorm buffers, Dropout): B = 24 batches per rank at ws 2, 16 at ws 3.
CNN = ['--dataset', 'digits', '--model', 'cnn', '--loss', 'ce', '--batch-size', '32', '--epochs', '1', '--lr', '0.05',
       '--momentum', '0.9']
CONFIGS = {
    'mlp_join_ws2': ['--world-size', '2', '--uneven', '2', '--join', 'true'] + MLP,
    'mlp_join_ws3': ['--world-size', '3', '--uneven', '1', '--join', 'true'] + MLP,
    'mlp_join_active_ws3': ['--world-size', '3', '--uneven', '1', '--join', 'true', '--join-divide', 'active'] + MLP,
    'cnn_join_ws2': ['--world-size', '2', '--uneven', '4', '--join', 'true'] + CNN,
    'cnn_join_ws3': ['--world-size', '3', '--uneven', '3', '--join', 'true'] + CNN,
    'cnn_join_active_ws3': ['--world-size', '3', '--uneven', '3', '--join', 'true', '--join-divide', 'active'] + CNN,
    # Join with even inputs: nobody joins, but DDP's buffer broadcasts come from the highest rank and the
    # epoch ends with rank ws-1's parameters and buffers broadcast.
    'cnn_join_even_ws3': ['--world-size', '3', '--join', 'true'] + CNN,
}


def write_json(path, doc):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, separators=(',', ':'))
        f.write('\n')
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main():
    t0 = time.monotonic()
    only = sys.argv[1:]  # names to (re)write; all when none
    for name, args in CONFIGS.items():
        if only and name not in only:
            continue
        out = os.path.join(HERE, name + '.json')
        t = time.monotonic()
        subprocess.run([sys.executable, REF] + args + ['--dump-params', out], check=True, stdout=subprocess.DEVNULL,
                       timeout=900)
        os.chmod(out, 0o644)
        print(f'wrote {os.path.relpath(out, ROOT)} ({time.monotonic() - t:.1f}s)', flush=True)
    write_json(os.path.join(HERE, 'configs.json'), CONFIGS)
    print(f'wrote configs.json; total {time.monotonic() - t0:.1f}s')


if __name__ == '__main__':
    sys.exit(main())
