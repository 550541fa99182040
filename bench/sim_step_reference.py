#!/usr/bin/python3
"""PyTorch reference for //bench:sim_step: notebook 000's DDP-by-hand step for R replicas, --threads threads.

Each replica: forward, MSE loss, zero_grad, backward on its own batch; gradients summed in rank order and
divided by R (in place, into every replica's .grad); SGD step. Prints `median_ms X` over --steps steps
(after one warm-up step).
"""
import argparse
import statistics
import time

import os
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # the bench sets it to --threads
import torch
import torch.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--layers', default='6,4,2')
    ap.add_argument('--replicas', type=int, default=2)
    ap.add_argument('--batch', type=int, default=32)
    ap.add_argument('--steps', type=int, default=100)
    ap.add_argument('--threads', type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)  # intra-op threads: PyTorch splits each GEMM, not the replicas
    sizes = [int(v) for v in a.layers.split(',')]

    def make():
        torch.manual_seed(12345)
        return nn.Sequential(*[nn.Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1)])

    models = [make() for _ in range(a.replicas)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.01) for m in models]
    torch.manual_seed(0)
    xs = [torch.randn(a.batch, sizes[0]) for _ in range(a.replicas)]
    ys = [torch.randn(a.batch, sizes[-1]) for _ in range(a.replicas)]
    loss_fn = nn.MSELoss()
    times = []
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        for m, o, x, y in zip(models, opts, xs, ys):
            loss = loss_fn(m(x), y)
            o.zero_grad(set_to_none=True)
            loss.backward()
        with torch.no_grad():
            for ps in zip(*[m.parameters() for m in models]):
                total = ps[0].grad.clone()
                for p in ps[1:]:
                    total += p.grad
                total /= a.replicas
                for p in ps:
                    p.grad.copy_(total)
        for o in opts:
            o.step()
        if step > 0:
            times.append((time.perf_counter() - t0) * 1e3)
    print(f'median_ms {statistics.median(times):.6f}')


if __name__ == '__main__':
    main()
