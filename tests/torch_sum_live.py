"""tensor.sum(0) of torch.randn(rows, cols) float32 under whichever CPU kernels this torch runs (set
ATEN_CPU_CAPABILITY to choose: avx2, avx512), for torch_sum_test's live cases, and the capability torch
used. The inputs are drawn in order from one Generator seeded 31: the test redraws them.

    ATEN_CPU_CAPABILITY=avx512 python3 tests/torch_sum_live.py OUT.json
"""
import json
import sys

import torch

ROWS = [1, 2, 3, 5, 8, 11, 15, 16, 17, 24, 31, 33, 64, 100, 257, 1000]
COLS = [1, 2, 5, 8, 9, 15, 16, 17, 31, 33, 48, 64, 65, 70, 130]


def main():
    g = torch.Generator()
    g.manual_seed(31)
    cases = []
    for rows in ROWS:
        for cols in COLS:
            x = torch.randn(rows, cols, generator=g)
            cases.append({'rows': rows, 'cols': cols, 'sum0': x.sum(0).tolist()})
    capability = [l.split(':')[1].strip() for l in torch.__config__.show().splitlines() if 'CPU capability' in l]
    with open(sys.argv[1], 'w') as f:
        json.dump({'capability': capability[0] if capability else '?', 'cases': cases}, f)


if __name__ == '__main__':
    main()
