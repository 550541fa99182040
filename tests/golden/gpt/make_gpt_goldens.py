#!/usr/bin/python3
"""Writes issue 17's tiny-GPT goldens from real torch 1.13 DistributedDataParallel (Gloo, CPU, one process per
rank, one thread each) by running sim/gpt_reference.py. Run from the repository root:

    /usr/bin/python3 tests/golden/gpt/make_gpt_goldens.py [name ...]    # all by default

Each config writes tests/golden/gpt/<name>.json; configs.json maps name -> argument list. Nothing here is
hand-edited. The kernels are pinned by sim/gpt_reference.py itself (before torch loads; the ranks inherit them).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
REF = os.path.join(ROOT, 'sim', 'gpt_reference.py')

SMALL = ['--n-embd', '16', '--block-size', '8']  # 2 layers, 2 heads, batch 4 are the defaults
CONFIGS = {
    'gpt_ws2_default': [],
    'gpt_ws4_dropout_seed_per_rank_nosync2': ['--world-size', '4', '--dropout', '0.1', '--seed-per-rank',
                                              '--no-sync', '2', '--steps', '3'] + SMALL,
    'gpt_ws3_clip_bucket_view_zeros': ['--world-size', '3', '--clip-grad-norm', '1.0', '--gradient-as-bucket-view',
                                       'true', '--zero-grad', 'zeros', '--steps', '5'] + SMALL,
    'gpt_ws2_aux_find_unused': ['--aux-head-every', '2', '--find-unused-parameters', 'true'] + SMALL,
    'gpt_ws2_gelu_tanh_nobias_eval': ['--gelu', 'tanh', '--bias', 'false', '--eval-every', '2'] + SMALL,
    'gpt_ws2_aux_unused_error': ['--aux-head-every', '2', '--find-unused-parameters', 'false'] + SMALL,
    # Communication hooks (issue 18): torch's own, registered before the first forward (sim/comm_hooks.py).
    'gpt_ws2_allreduce_hook': ['--comm-hook', 'allreduce'] + SMALL,
    'gpt_ws3_allreduce_hook': ['--world-size', '3', '--comm-hook', 'allreduce'] + SMALL,
    'gpt_ws2_fp16_hook': ['--comm-hook', 'fp16-compress', '--dropout', '0.1'] + SMALL,
    'gpt_ws3_fp16_hook': ['--world-size', '3', '--comm-hook', 'fp16-compress', '--clip-grad-norm', '1.0'] + SMALL,
    'gpt_ws2_powersgd_hook': ['--comm-hook', 'powersgd', '--steps', '5'] + SMALL,
    'gpt_ws3_powersgd_rank2_hook': ['--world-size', '3', '--comm-hook', 'powersgd', '--powersgd-rank', '2',
                                    '--steps', '5'] + SMALL,
    # ZeroRedundancyOptimizer (AdamW, nanoGPT's two groups): the partition over the groups and the state per rank.
    'gpt_ws2_zero': ['--zero', 'true'] + SMALL,
    'gpt_ws3_zero': ['--world-size', '3', '--zero', 'true', '--steps', '3'] + SMALL,
    # Uneven inputs under one Join around the loop: rank r runs --steps - K*r steps.
    'gpt_ws2_uneven1_join': ['--uneven', '1', '--join', 'true'] + SMALL,
    'gpt_ws3_uneven1_join': ['--world-size', '3', '--uneven', '1', '--join', 'true'] + SMALL,
    'gpt_ws2_uneven1_join_zero': ['--uneven', '1', '--join', 'true', '--zero', 'true'] + SMALL,
    'gpt_ws3_uneven1_join_zero': ['--world-size', '3', '--uneven', '1', '--join', 'true', '--zero', 'true']
    + SMALL,
    # C 20 and T 12: LayerNorm rows and softmax rows that are not whole AVX2 vectors (scalar tails).
    'gpt_single': ['--single', '--n-embd', '20', '--block-size', '12'],
    'gpt_single_dropout_tanh_nobias': ['--single', '--dropout', '0.1', '--gelu', 'tanh', '--bias', 'false'] + SMALL,
}


def write_json(path, doc):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.golden.')
    with os.fdopen(fd, 'w') as f:
        json.dump(doc, f, indent=1)
        f.write('\n')
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main():
    names = sys.argv[1:] or list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        print(f'make_gpt_goldens: unknown config {unknown[0]!r}; known: {", ".join(CONFIGS)}', file=sys.stderr)
        return 2
    t0 = time.monotonic()
    for name in names:
        out = os.path.join(HERE, name + '.json')
        t = time.monotonic()
        subprocess.run([sys.executable, REF] + CONFIGS[name] + ['--dump-params', out], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
        print(f'wrote {os.path.relpath(out, ROOT)} ({time.monotonic() - t:.1f}s)', flush=True)
    write_json(os.path.join(HERE, 'configs.json'), CONFIGS)
    print(f'wrote configs.json; total {time.monotonic() - t0:.1f}s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
