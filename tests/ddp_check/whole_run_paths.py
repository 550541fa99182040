"""The recorder's two ways of taking a small CPU model's whole-run steps give the same records: _fast.c's passes
(fast.py) and, where no C compiler is found (DDPLAB_TRACE_FAST=0 stands in for that), numpy's copies (flat.py).
The same training (3 Gloo ranks, an MLP of odd sizes, two micro-batches under no_sync(), a clip, AdamW, 25 steps:
10 recorded whole, 15 whole-run) is traced once each way; every whole-run record of every rank must hold the
same metadata (digests, fingerprints, flags, ...; not the run id), the same sample bit for bit and weighted sums
within float64's rounding.

    /usr/bin/python3 tests/ddp_check/whole_run_paths.py WORK_DIR   # leaves WORK_DIR/fast and WORK_DIR/numpy
"""
import datetime
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS, WORLD = 25, 3


def train(rank, run_dir, init):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ddplab_trace import DDPTrace
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(17, 33), torch.nn.ReLU(), torch.nn.Linear(33, 2043),
                                    torch.nn.ReLU(), torch.nn.Linear(2043, 3)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    with DDPTrace(model, opt, run_dir):
        for _ in range(STEPS):
            opt.zero_grad(set_to_none=True)
            with model.no_sync():
                (F.cross_entropy(model(torch.randn(5, 17, generator=g)), torch.randint(0, 3, (5,), generator=g)) / 2).backward()
            (F.cross_entropy(model(torch.randn(5, 17, generator=g)), torch.randint(0, 3, (5,), generator=g)) / 2).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            opt.step()
    dist.destroy_process_group()


def records(rank_dir):
    """{step: (metadata without the run id, {name: numpy array})} of rank_dir/steps.log."""
    out = {}
    raw = open(os.path.join(rank_dir, "steps.log"), "rb").read()
    at = 0
    while len(raw) - at >= 16:
        n, step = struct.unpack("<QQ", raw[at:at + 16])
        rec = raw[at + 16:at + 16 + n]
        at += 16 + n
        (h,) = struct.unpack("<Q", rec[:8])
        header = json.loads(rec[8:8 + h].decode("utf-8"))
        meta = json.loads(header.pop("__metadata__")["ddplab"])
        meta.pop("run_id")
        data = rec[8 + h:]
        tensors = {}
        for name, e in header.items():
            b, end = e["data_offsets"]
            tensors[name] = np.frombuffer(data[b:end], dtype=np.float64 if e["dtype"] == "F64" else np.float32)
        out[step] = (meta, tensors)
    return out


def compare(a_dir, b_dir):
    """Problems, [] where every rank's whole-run records agree; and how many records were compared."""
    bad, n = [], 0
    for r in range(WORLD):
        a, b = records(os.path.join(a_dir, "rank%d" % r)), records(os.path.join(b_dir, "rank%d" % r))
        if sorted(a) != sorted(b) or len(a) < STEPS - 12:
            bad.append("rank %d: whole-run steps %s against %s" % (r, sorted(a), sorted(b)))
            continue
        for step in sorted(a):
            (ma, ta), (mb, tb) = a[step], b[step]
            n += 1
            if ma != mb:
                keys = sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k))
                bad.append("rank %d step %d: metadata differs in %s" % (r, step, keys))
            if sorted(ta) != sorted(tb):
                bad.append("rank %d step %d: tensors %s against %s" % (r, step, sorted(ta), sorted(tb)))
                continue
            for name in ta:
                x, y = ta[name], tb[name]
                if name.startswith("wsum/"):
                    x, y = x.reshape(-1, 3), y.reshape(-1, 3)
                    same_nan = np.array_equal(np.isnan(x), np.isnan(y))
                    ok = np.isnan(x) | (np.abs(x - y) <= 1e-12 * np.abs(np.nan_to_num(x[:, 1:2], nan=0.0)) + 1e-9 * np.abs(x))
                    if not (same_nan and ok.all()):
                        bad.append("rank %d step %d: %s %s against %s" % (r, step, name, x.tolist(), y.tolist()))
                elif x.tobytes() != y.tobytes():
                    bad.append("rank %d step %d: %s differs" % (r, step, name))
    return bad, n


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--run":
        import torch.multiprocessing as mp
        init = os.path.join(tempfile.mkdtemp(), "init")
        mp.start_processes(train, args=(sys.argv[2], init), nprocs=WORLD, start_method="fork")
        return 0
    work = sys.argv[1]
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "..", "verify"))
    for name, fast in (("fast", "1"), ("numpy", "0")):
        r = subprocess.run([sys.executable, __file__, "--run", os.path.join(work, name), "x"],
                           env=dict(env, DDPLAB_TRACE_FAST=fast), timeout=300)
        if r.returncode:
            print("the %s run failed (exit %d)" % (name, r.returncode))
            return 1
    bad, n = compare(os.path.join(work, "fast"), os.path.join(work, "numpy"))
    for b in bad[:20]:
        print("FAIL " + b)
    print("whole-run records of _fast.c and numpy agree: %d records" % n if not bad else "%d differences" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
