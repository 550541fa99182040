"""The training run bench/check_trace.cc records and checks: an MLP of about --params-m million parameters
(Linear(W, W) x 6 with W chosen to fit; --model cnn: a VGG-style CNN on 32x32 images), SGD with momentum, DDP over Gloo on --world-size CPU ranks, --batch (8),
--steps optimizer steps, traced with verify/ddplab_trace unless --no-trace. Prints one line,
'train ms/step <median over the steps after the first>', measured on rank 0 around each whole step (forward,
backward with DDP's all-reduce, optimizer.step and, traced, the recorder's snapshots and file writes).
"""
import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "verify"))
from ddplab_trace import DDPTrace  # noqa: E402


def cnn(params_m):
    """A VGG-style CNN for 32x32 images (CIFAR-10's size): 3x3 convolutions of 64, 128, 256 and c channels, c
    chosen so the whole holds about params_m million parameters, max-pooled between stages, then a linear
    classifier. Its step does far more arithmetic per parameter than the MLP's (each weight meets every pixel)."""
    nn = torch.nn
    fixed = 3 * 64 * 9 + 64 * 64 * 9 + 64 * 128 * 9 + 128 * 128 * 9 + 128 * 256 * 9 + 256 * 256 * 9
    rest = max(params_m * 1e6 - fixed, 0) / 9  # the last stage: 9 (256 c + 2 c^2) weights
    c = max(1, int((-256 + (256 ** 2 + 8 * rest) ** 0.5) / 4))
    layers, cin = [], 3
    for cout, n in ((64, 2), (128, 2), (256, 2), (c, 3)):
        for _ in range(n):
            layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU()]
            cin = cout
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(cin * 2 * 2, 10))


def worker(rank, args, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
    torch.manual_seed(0)
    if args.model == "cnn":
        model, shape = cnn(args.params_m), (3, 32, 32)
    else:
        width = int((args.params_m * 1e6 / 6) ** 0.5)
        model, shape = torch.nn.Sequential(*[m for _ in range(6) for m in (torch.nn.Linear(width, width),
                                                                           torch.nn.ReLU())]), (width,)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    trace = DDPTrace(ddp, opt, args.out, max_bytes=1 << 40, full=args.full) if args.trace else None
    g = torch.Generator().manual_seed(rank)
    times = []
    for _ in range(args.steps):
        x = torch.randn(args.batch, *shape, generator=g)
        t0 = time.perf_counter()
        opt.zero_grad()
        ddp(x).square().mean().backward()
        opt.step()
        dist.barrier()
        times.append(time.perf_counter() - t0)
    if trace:
        trace.close()
    if rank == 0:
        n = sum(p.numel() for p in model.parameters())
        print(f"params {n} train ms/step {1000 * statistics.median(times[1:] or times):.1f}", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="")
    p.add_argument("--params-m", type=float, default=25.0)
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=8, help="samples per rank and step")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--no-trace", dest="trace", action="store_false")
    p.add_argument("--full", action="store_true", help="DDPTrace(..., full=True): every value, no digests")
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()
