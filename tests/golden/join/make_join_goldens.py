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
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'models'))
# The writer of tests/golden/models/, which also pins the kernels (oneDNN's ISA for the CNN's convolutions) as
# tests/BUILD pins them for the tests.
from make_model_goldens import write_goldens  # noqa: E402

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
    # --join-scope run: one Join around all epochs (PyTorch's Join tutorial); a rank out of batches in epoch e goes
    # on into epoch e+1, so the ranks' all-reduces pair across epochs, and only the run's end joins anybody.
    # MLP: B = 6 per rank at ws 2; rank 1 runs 4 per epoch, three epochs (12 vs 18 steps).
    'mlp_join_run_ws2': ['--world-size', '2', '--uneven', '2', '--join', 'true', '--join-scope', 'run']
    + MLP[:-1] + ['3'],  # --epochs 3
    # CNN: B = 16 per rank at ws 3 (batch 32); ranks run 16, 13, 10 per epoch, two epochs; BatchNorm buffers.
    'cnn_join_run_ws3': ['--world-size', '3', '--uneven', '3', '--join', 'true', '--join-scope', 'run']
    + [v if v != '1' else '2' for v in CNN],  # --epochs 2
    # Join with a communication hook: a joined rank runs the hook on zero buckets (check_join_facts.py).
    'mlp_join_allreduce_hook_ws2': ['--world-size', '2', '--uneven', '2', '--join', 'true', '--comm-hook',
                                    'allreduce'] + MLP,
    'mlp_join_fp16_hook_ws3': ['--world-size', '3', '--uneven', '1', '--join', 'true', '--comm-hook',
                               'fp16-compress'] + MLP,
    'mlp_join_powersgd_ws2': ['--world-size', '2', '--uneven', '2', '--join', 'true', '--comm-hook', 'powersgd',
                              '--powersgd-start-iter', '2'] + MLP,
    # Join([ddp, zero]) with ZeroRedundancyOptimizer: a joined rank's ZeRO hook steps its shard with the grads
    # it has (None after zero_grad(set_to_none=True): the shard stays) and broadcasts it (check_join_facts.py).
    'mlp_join_zero_ws2': ['--world-size', '2', '--uneven', '2', '--join', 'true', '--zero', 'true'] + MLP,
    'cnn_join_zero_ws3': ['--world-size', '3', '--uneven', '3', '--join', 'true', '--zero', 'true'] + CNN,
}


if __name__ == '__main__':
    write_goldens(HERE, CONFIGS, sys.argv[1:])
