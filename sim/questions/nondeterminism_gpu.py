"""Question 19 on a GPU (torch 2.x): which GPU kernels give different bits for the same inputs from run to
run, and what torch.use_deterministic_algorithms(True) changes. One process, cuda:0, fixed inputs; each case
runs REPEATS times and counts the distinct results bit for bit (1: the same every time). One JSON line each.

    python3 sim/questions/nondeterminism_gpu.py [--repeats 10]        (tools/gpu_checks.sh runs it)

Cases: index_add_ with many repeated indices (atomic float additions in whatever order threads arrive);
matmul (cuBLAS); conv2d's weight gradient with cudnn.benchmark on; then the same index_add_ under
use_deterministic_algorithms(True), and ops that mode refuses (their error's first line).
"""
import argparse
import hashlib
import json

import torch
import torch.nn.functional as F


def distinct(fn, repeats):
    seen = set()
    for _ in range(repeats):
        out = fn()
        torch.cuda.synchronize()
        seen.add(hashlib.sha1(out.detach().cpu().numpy().tobytes()).hexdigest())
    return len(seen)


def report(case, n, repeats, **extra):
    print(json.dumps({"question": 19, "case": case, "distinct_results": n, "repeats": repeats,
                      "torch": torch.__version__, **extra}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args()
    r = args.repeats
    dev = torch.device("cuda:0")
    try:
        cudnn = torch.backends.cudnn.version()
    except RuntimeError as e:  # a cuDNN on LD_LIBRARY_PATH older than torch's own
        cudnn = "unusable: " + str(e).splitlines()[0][:120]
    print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| cudnn", cudnn, flush=True)
    g = torch.Generator().manual_seed(0)
    src = torch.randn(1 << 20, generator=g).to(dev)
    index = torch.randint(0, 64, (1 << 20,), generator=g).to(dev)
    a = torch.randn(1024, 1024, generator=g).to(dev)
    b = torch.randn(1024, 1024, generator=g).to(dev)
    img = torch.randn(32, 16, 32, 32, generator=g).to(dev)
    w = torch.randn(32, 16, 3, 3, generator=g).to(dev).requires_grad_()

    def index_add():
        return torch.zeros(64, device=dev).index_add_(0, index, src)

    def conv_wgrad():
        w.grad = None
        F.conv2d(img, w, padding=1).square().sum().backward()
        return w.grad

    report("index_add_ (1M values into 64 slots)", distinct(index_add, r), r, deterministic_mode=False)
    report("matmul 1024x1024 (cuBLAS)", distinct(lambda: a @ b, r), r, deterministic_mode=False)
    torch.backends.cudnn.benchmark = True
    try:
        report("conv2d weight gradient, cudnn.benchmark=True", distinct(conv_wgrad, r), r, deterministic_mode=False)
    except RuntimeError as e:
        print(json.dumps({"question": 19, "case": "conv2d", "error": str(e).splitlines()[0][:300]}), flush=True)
    torch.backends.cudnn.benchmark = False

    torch.use_deterministic_algorithms(True)
    report("index_add_ (1M values into 64 slots)", distinct(index_add, r), r, deterministic_mode=True)
    refused = {
        "torch.histc on CUDA": lambda: torch.histc(src, bins=10),
        "adaptive_avg_pool2d backward on CUDA": lambda: F.adaptive_avg_pool2d(
            img.clone().requires_grad_(), 5).sum().backward(),
        "bincount with weights on CUDA": lambda: torch.bincount(index, weights=src),
    }
    for case, fn in refused.items():
        try:
            fn()
            torch.cuda.synchronize()
            print(json.dumps({"question": 19, "case": case, "deterministic_mode": True, "refused": False,
                              "torch": torch.__version__}), flush=True)
        except RuntimeError as e:
            print(json.dumps({"question": 19, "case": case, "deterministic_mode": True, "refused": True,
                              "error": str(e).splitlines()[0][:300], "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
