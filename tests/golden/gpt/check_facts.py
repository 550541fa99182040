#!/usr/bin/python3
"""Measures the torch 1.13 facts docs/tiny_gpt.md states, by running sim/gpt_reference.py
(real DDP on Gloo, kernels pinned) in pairs of configurations and printing what differs. Run from the
repository root (about 2-3 minutes on a loaded 2-core machine):

    /usr/bin/python3 tests/golden/gpt/check_facts.py [a b c d e f g]   # all by default

Nothing is written to the repository; every number printed comes from torch here.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
REF = os.path.join(ROOT, 'sim', 'gpt_reference.py')
TMP = tempfile.mkdtemp(prefix='gpt_facts.')


def run(args, debug=None):
    out = os.path.join(TMP, 'run.json')
    env = dict(os.environ)
    if debug:
        env['TORCH_DISTRIBUTED_DEBUG'] = debug
    t = time.monotonic()
    subprocess.run([sys.executable, REF] + args + ['--dump-params', out], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    wall = time.monotonic() - t
    with open(out) as f:
        doc = json.load(f)
    doc['_wall'] = wall
    return doc


def flat(params):
    return np.concatenate([np.asarray(v, dtype=np.float32).ravel() for _, v in sorted(params.items())])


def ordered(x):
    i = x.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7fffffff), i)


def compare(d1, d2, label):
    """The final parameters (the oracle checked every rank's equal within a run) and all losses."""
    for d in (d1, d2):
        if d['ranks'][0]['error']:
            e = d['ranks'][0]['error']
            print(f'  {label}: torch raised at step {e["step"]} micro {e["micro"]} ({e["phase"]}): {e["message"]}')
    assert d1['replicas_equal'] and d2['replicas_equal'], 'ranks differ'
    a, b = flat(d1['params']), flat(d2['params'])
    diff = a.view(np.int32) != b.view(np.int32)
    ulps = int(np.abs(ordered(a) - ordered(b)).max())
    step_losses = [sum(x == y for x, y in zip(l1, l2)) for l1, l2 in zip(d1['losses'], d2['losses'])]
    print(f'  {label}: {int(diff.sum())} of {a.size} parameter values differ in bits (max |diff| '
          f'{float(np.abs(a - b).max()):.3g}, max {ulps} ulps); losses equal: {d1["losses"] == d2["losses"]} '
          f'(equal micro-losses per rank: {step_losses} of {len(d1["losses"][0])})')


def fact_a():
    print('(a) aux head unused, find_unused_parameters=false (ws 2, --aux-head-every 2: used on steps 0, 2, ...)')
    for debug in ('OFF', 'INFO', 'DETAIL'):
        d = run(['--aux-head-every', '2', '--find-unused-parameters', 'false'], debug)
        for r in d['ranks']:
            e = r['error']
            print(f'  TORCH_DISTRIBUTED_DEBUG={debug} rank {r["rank"]}: {e["type"]} at step {e["step"]} micro '
                  f'{e["micro"]} phase {e["phase"]}; module forward ran: {e["module_forward_ran"]}; generator '
                  f'advanced: {e["generator_advanced"]}; losses before: {r["micro_losses"]}')
        print('  message (rank 0):\n    ' + d['ranks'][0]['error']['message'].replace('\n', '\n    '))
    d = run(['--aux-head-every', '2', '--find-unused-parameters', 'false', '--no-sync', '2'])
    e = d['ranks'][0]['error']
    print(f'  --no-sync 2: raised at step {e["step"]} micro {e["micro"]} phase {e["phase"]} (module forward ran: '
          f'{e["module_forward_ran"]}); losses before: {d["ranks"][0]["micro_losses"]}')
    d = run(['--aux-head-every', '2', '--find-unused-parameters', 'false', '--seed-per-rank'])
    print(f'  --seed-per-rank: replicas equal when the error is raised: {d["replicas_equal"]} '
          '(step 1 had no all-reduce: its bucket never became ready)')
    print(f'  grad None after step 1 backward (rank 0): {d["ranks"][0]["grad_none"]}')


def fact_b():
    print('(b) aux head unused on odd steps, find_unused_parameters=true (ws 2, --aux-head-every 2)')
    for zg in ('none', 'zeros'):
        d = run(['--aux-head-every', '2', '--find-unused-parameters', 'true', '--zero-grad', zg])
        r = d['ranks'][0]
        print(f'  --zero-grad {zg}: per step, grad None: {r["grad_none"]}; grad all zero: {r["grad_all_zero"]}; '
              f'unchanged by optimizer.step: {r["unchanged_by_step"]}; error: {r["error"]}')
        print(f'    buckets: {r["buckets"]["buckets"]}')


def fact_c():
    print('(c) gradient_as_bucket_view true vs false (default model, 4 steps)')
    for ws in ('3', '2'):
        for zg in ('zeros', 'none'):
            base = ['--world-size', ws, '--zero-grad', zg]
            compare(run(base + ['--gradient-as-bucket-view', 'false']),
                    run(base + ['--gradient-as-bucket-view', 'true']), f'ws {ws} --zero-grad {zg}')


def fact_d():
    print('(d) static_graph true vs false (no aux head)')
    for ws in ('2', '3'):
        compare(run(['--world-size', ws]), run(['--world-size', ws, '--static-graph', 'true']), f'ws {ws}')
    compare(run(['--world-size', '3', '--dropout', '0.1']),
            run(['--world-size', '3', '--dropout', '0.1', '--static-graph', 'true']), 'ws 3 dropout 0.1')
    # 1.13 cannot run static_graph with no_sync (require_backward_grad_sync False): an internal assert.
    compare(run(['--no-sync', '2']), run(['--no-sync', '2', '--static-graph', 'true']), 'ws 2 no-sync 2')


def fact_e():
    print('(e) Dropout(0.0) draws? DDP buffer broadcasts per forward')
    sys.path.insert(0, os.path.join(ROOT, 'sim'))
    import torch
    from gpt_model import GPT, GPTConfig, TextData
    data = TextData('/usr/share/common-licenses/GPL-3')
    for p in (0.0, 0.1):
        torch.manual_seed(1337)
        m = GPT(GPTConfig(len(data.vocab), 16, 2, 2, 32, p, True, 'none', 0))
        x, y, _ = data.get_batch('train', 4, 16)
        s = torch.get_rng_state()
        m(x, y)
        print(f'  dropout {p}: training forward advanced the generator: {not torch.equal(s, torch.get_rng_state())}')
    print(f'  nn.Dropout(0.0) in training returns its input object: '
          f'{(lambda t: torch.nn.Dropout(0.0).train()(t) is t)(torch.ones(3))}')
    for args in ([], ['--no-sync', '2'], ['--eval-every', '2']):
        r = run(args)['ranks'][0]
        per = r['buffer_broadcasts_per_forward']
        evals = r['broadcasts_total'] - r['broadcasts_at_construction'] - sum(map(sum, per))
        print(f'  {args or "default"}: construction {r["broadcasts_at_construction"]}, per training forward {per}, '
              f'during evals {evals} (eval forwards: {sum(len(e["train_iters"]) * 2 for e in r["eval"])})')
    compare(run([]), run([], 'OFF'), 'TORCH_DISTRIBUTED_DEBUG=DETAIL vs OFF (default config)')


def fact_f():
    print('(f) buckets after the rebuild')
    for args in (['--bucket-cap-mb', '0.01'], ['--n-embd', '128', '--n-head', '4', '--bucket-cap-mb', '0.01']):
        r = run(args + ['--steps', '3'])['ranks'][0]['buckets']
        print(f'  {args}: {len(r["buckets"])} bucket(s), sizes {r.get("logging_rebuilt_bucket_sizes")} bytes, '
              f'indices {r.get("logging_rebuilt_per_bucket_param_indices")!r}')
        for i, b in enumerate(r['buckets']):
            print(f'    bucket {i}: {b}')


def fact_g():
    print('(g) wall time of the default config at ws 2 (whole script, spawn included)')
    for _ in range(3):
        print(f'  {run([])["_wall"]:.2f}s')


def main():
    which = sys.argv[1:] or list('abcdefg')
    for k in which:
        globals()['fact_' + k]()
        sys.stdout.flush()


if __name__ == '__main__':
    main()
