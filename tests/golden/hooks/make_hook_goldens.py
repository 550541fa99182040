#!/usr/bin/python3
"""Writes the goldens of DDP communication hooks (issue 18) from real torch DistributedDataParallel with
torch's own hooks registered (sim/ddp_reference.py --comm-hook: allreduce_hook, fp16_compress_hook,
powerSGD_hook, noop_hook). Run from the repository root:

    /usr/bin/python3 tests/golden/hooks/make_hook_goldens.py [NAME ...]   # all, or only the configs named

Same format and kernels as tests/golden/models/make_model_goldens.py (whose writer this uses). powerSGD_hook
runs with ONE bucket: with several, torch 1.13's Gloo ranks issue the P and Q all-reduces from callback
threads in different orders and abort or hang (README, "Communication hooks"), so its models stay under
1 MiB of gradients. bf16_compress_hook does not run on CPU in torch 1.13 (register_comm_hook refuses it).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'models'))
from make_model_goldens import write_goldens  # noqa: E402  (also pins the kernels)

# Two buckets from iteration 1 on (1.5 MB of gradients; the first rebuilt bucket closes at 1 MiB).
MLP = ['--layers', '32,600,600,10', '--activation', 'relu', '--samples', '96', '--batch-size', '8', '--lr', '0.05',
       '--momentum', '0.9', '--epochs', '1']
# One bucket (6,922 gradients) for powerSGD_hook; compression starts at iteration 2.
SMALL_MLP = ['--layers', '32,64,64,10', '--activation', 'relu', '--samples', '96', '--batch-size', '8', '--lr',
             '0.05', '--momentum', '0.9', '--epochs', '1']
CNN = ['--dataset', 'digits', '--model', 'cnn', '--loss', 'ce', '--batch-size', '32', '--epochs', '1', '--lr', '0.05',
       '--momentum', '0.9']
POWERSGD = ['--comm-hook', 'powersgd', '--powersgd-start-iter', '2']

CONFIGS = {
    'mlp_allreduce_ws2': ['--world-size', '2', '--comm-hook', 'allreduce'] + MLP,
    'mlp_allreduce_ws3': ['--world-size', '3', '--comm-hook', 'allreduce'] + MLP,
    'mlp_fp16_ws2': ['--world-size', '2', '--comm-hook', 'fp16-compress'] + MLP,
    'mlp_fp16_ws3': ['--world-size', '3', '--comm-hook', 'fp16-compress'] + MLP,
    'mlp_noop_ws2': ['--world-size', '2', '--comm-hook', 'noop'] + MLP,
    'mlp_powersgd_ws2': ['--world-size', '2'] + POWERSGD + SMALL_MLP,
    'mlp_powersgd_rank2_ws3': ['--world-size', '3', '--powersgd-rank', '2'] + POWERSGD + SMALL_MLP,
    'cnn_allreduce_ws2': ['--world-size', '2', '--comm-hook', 'allreduce'] + CNN,
    'cnn_allreduce_ws3': ['--world-size', '3', '--comm-hook', 'allreduce'] + CNN,
    'cnn_fp16_ws2': ['--world-size', '2', '--comm-hook', 'fp16-compress'] + CNN,
    'cnn_fp16_ws3': ['--world-size', '3', '--comm-hook', 'fp16-compress'] + CNN,
    'cnn_powersgd_ws2': ['--world-size', '2'] + POWERSGD + CNN,
    'cnn_powersgd_ws3': ['--world-size', '3'] + POWERSGD + CNN,
}

if __name__ == '__main__':
    write_goldens(HERE, CONFIGS, sys.argv[1:])
