#!/usr/bin/python3
"""Lab 009's claims in PyTorch: each fixed version of train.py run untraced, with torch's own
DistributedDataParallel beside it on a copy of the model (train.py --oracle: at every step DDP is given the
hand-written model's weights and the same batch), and the count of gradient values the hand-written sync stepped
with that are DDP's bits, printed as the lab prints its "check:" lines.

    /usr/bin/python3 notebooks_ported/009_own_ddp/reference.py [--world-size N] [--version V ...]

The counts depend on the processor's kernels (the local gradients' last bits), so they are not kept as a golden:
tests/lab009_test runs this beside the lab and checks that every line it prints is among the lab's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
VERSIONS = ["tutorial", "flat", "hooks", "buckets"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world-size", type=int, default=3)
    p.add_argument("--version", nargs="*", default=VERSIONS, choices=VERSIONS)
    args = p.parse_args()
    for v in args.version:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "oracle.json")
            subprocess.run([sys.executable, os.path.join(HERE, "train.py"), "--version", v, "--world-size",
                            str(args.world_size), "--no-trace", "--oracle", path], check=True)
            with open(path) as f:
                o = json.load(f)
        print("check: %s at world size %d: %d of %d gradient values stepped with are torch DDP's bits"
              % (v, args.world_size, o["exact"], o["values"]))


if __name__ == "__main__":
    main()
