"""Question 12 on a GPU (torch 2.x, NCCL): does DDP with SyncBatchNorm at world size W and batch B per rank
train like one device at batch W x B, and how far is plain BatchNorm under DDP from it?

W ranks share cuda:0 (each poses as its own host, NCCL_HOSTID, so NCCL connects them over sockets); every
collective has a 60 s timeout. Model Linear(8,16) -> BatchNorm1d(16) -> ReLU -> Linear(16,4), MSE, SGD lr 0.1,
STEPS steps; step s's global batch is X[s] (W*B rows), rank r takes rows r*B..(r+1)*B. Rank 0 also trains the
same model on one device with each whole X[s]. One JSON line per variant (syncbn, batchnorm): the largest
|difference| of the parameters and of running_mean/running_var from one device's, whether they are equal bit
for bit, and step 0's loss (the mean of the ranks' losses) against one device's.

    python3 sim/questions/syncbn_gpu.py [--world-size 3] [--batch 8] [--steps 5]    (tools/gpu_checks.sh runs it)
    --device cpu --backend gloo: the same script on CPU (torch 1.13 refuses SyncBatchNorm there; see syncbn_cpu.py)
"""
import argparse
import datetime
import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def make_model(sync):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
    return nn.SyncBatchNorm.convert_sync_batchnorm(m) if sync else m


def data(args):
    g = torch.Generator().manual_seed(1)
    n = args.world_size * args.batch
    return torch.randn(args.steps, n, 8, generator=g), torch.randn(args.steps, n, 4, generator=g)


def train(model, xs, ys, dev):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


def state(model):
    sd = model.module.state_dict() if isinstance(model, DDP) else model.state_dict()
    return {k: v.detach().cpu() for k, v in sd.items() if v.is_floating_point()}


def compare(mine, ref, keys):
    diffs = [(mine[k] - ref[k]).abs().max().item() for k in keys]
    return max(diffs), all(torch.equal(mine[k], ref[k]) for k in keys)


def worker(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_HOSTID="ddplab-q12-rank%d" % rank)
    dev = torch.device("cuda:0" if args.device == "cuda" else "cpu")
    if args.device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(args.backend, rank=rank, world_size=args.world_size,
                            timeout=datetime.timedelta(seconds=60))
    X, Y = data(args)
    lo, hi = rank * args.batch, (rank + 1) * args.batch
    results = {}
    # DDP refuses SyncBatchNorm on CPU modules (ValueError at DDP(...)): on CPU only plain BatchNorm runs.
    for variant in ("syncbn", "batchnorm") if args.device == "cuda" else ("batchnorm",):
        model = make_model(variant == "syncbn").to(dev)
        ddp = DDP(model, device_ids=[0] if args.device == "cuda" else None)
        losses = train(ddp, X[:, lo:hi], Y[:, lo:hi], dev)
        loss0 = losses[0].clone()
        dist.all_reduce(loss0)
        results[variant] = (state(ddp), loss0.item() / args.world_size)
    if rank == 0:
        one = make_model(False).to(dev)
        one_losses = train(one, X, Y, dev)
        ref = state(one)
        params = [k for k in ref if "running" not in k]
        stats = [k for k in ref if "running_mean" in k or "running_var" in k]
        for variant, (sd, loss0) in results.items():
            pd, pe = compare(sd, ref, params)
            sdiff, se = compare(sd, ref, stats)
            print(json.dumps({"question": 12, "variant": variant, "world_size": args.world_size,
                              "batch_per_rank": args.batch, "steps": args.steps, "device": str(dev),
                              "torch": torch.__version__, "params_max_abs_diff": pd, "params_bitwise": pe,
                              "running_stats_max_abs_diff": sdiff, "running_stats_bitwise": se,
                              "step0_mean_rank_loss": loss0, "step0_one_device_loss": one_losses[0].item()}),
                  flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--world-size", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    args = p.parse_args()
    if args.device == "cuda":
        print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__,
              "| nccl", ".".join(map(str, torch.cuda.nccl.version())), flush=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(args, port), nprocs=args.world_size, start_method="spawn")
