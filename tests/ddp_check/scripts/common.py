"""What the learner-style scripts in this directory share: argument parsing, starting N ranks on Gloo with
mp.spawn, and --final (every rank's final parameters, to compare traced and untraced runs bit for bit).

Each script is run as
    python3 SCRIPT.py --out RUN_DIR [--world-size N] [--steps S] [--every K] [--no-trace] [--final FILE.pt|.json]
"""
import argparse
import hashlib
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "verify"))  # ddplab_trace


def parse_args(world_size=2, steps=4, extra=None):
    """The options every script takes; extra(parser), when given, adds the script's own."""
    p = argparse.ArgumentParser()
    p.add_argument("--out", help="the trace's RUN_DIR (needed unless --no-trace)")
    p.add_argument("--world-size", type=int, default=world_size)
    p.add_argument("--steps", type=int, default=steps, help="optimizer steps")
    p.add_argument("--every", type=int, default=1, help="record every K-th step")
    p.add_argument("--full", action="store_true", help="DDPTrace(..., full=True): every value, no digests")
    p.add_argument("--no-trace", dest="trace", action="store_false", help="run without DDPTrace")
    p.add_argument("--final", help="write every rank's final parameters here (.pt, or .json of hashes)")
    p.add_argument("--no-close", action="store_true", help="never call trace.close() (scripts that honour it)")
    if extra:
        extra(p)
    args = p.parse_args()
    if args.trace and not args.out and not getattr(args, "list", False):
        p.error("--out RUN_DIR is needed unless --no-trace")
    return args


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, main, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    if os.environ.get("DDPLAB_START_METHOD", "spawn") == "fork":
        torch.seed()  # a fresh interpreter's generator is seeded at random, a fork's is its parent's: as if fresh
    dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
    main(rank, args.world_size, args)
    dist.barrier()  # no rank tears its connections down while another still uses them
    dist.destroy_process_group()


def launch(main, args):
    """Runs main(rank, world_size, args) on args.world_size ranks (processes), Gloo, 127.0.0.1.

    The ranks start as mp.spawn starts them (a fresh interpreter each), unless DDPLAB_START_METHOD=fork: then
    they are forks of this process, which has imported torch already, each reseeding torch's default generator at
    random as a fresh interpreter does (a script that seeds nothing, like mingpt_split.py, draws a different split
    on every rank either way). ddp_check_test forks most scripts: the run is the same, and each rank skips
    importing torch (measured: a 3-rank run of mlp_sgd.py takes 2.5 s of CPU forked against 9.6 s spawned on
    torch 1.13, 9.6 s against 20 s on torch 2.x)."""
    method = os.environ.get("DDPLAB_START_METHOD", "spawn")
    mp.start_processes(_worker, args=(main, args, _free_port()), nprocs=args.world_size, join=True,
                       start_method=method)


def save_final(ddp_model, args):
    """With --final FILE: rank 0 writes {rank: {name: tensor}} (.pt) or {rank: {name: blake2b hex}} (.json)."""
    if not args.final:
        return
    save_final_params({n: p.detach().cpu().clone() for n, p in ddp_model.module.named_parameters()}, args)


def save_final_params(mine, args):
    """save_final for a dict {name: tensor} of this rank's (several models' parameters, say)."""
    if not args.final:
        return
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    if dist.get_rank() != 0:
        return
    if args.final.endswith(".json"):
        out = {str(r): {n: hashlib.blake2b(t.contiguous().numpy().tobytes()).hexdigest() for n, t in ps.items()}
               for r, ps in enumerate(everyone)}
        with open(args.final, "w") as f:
            json.dump(out, f, indent=1)
    else:
        torch.save({r: ps for r, ps in enumerate(everyone)}, args.final)
