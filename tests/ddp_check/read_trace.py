"""Reads a run that verify/ddplab_trace wrote (docs/trace_format.md), independently of it, and checks it.

    /usr/bin/python3 tests/ddp_check/read_trace.py RUN_DIR [--clean] [-v]

Checks every rank's manifest (one run id, ranks 0..N-1, the same steps) and every step file (8-byte header
length, JSON header, F32 tensors tiling the data exactly, the ddplab metadata, tensor names of known kinds
and parameters, shapes as the manifest says). With --clean (a run DDP reduced normally): grad/ is identical
on all ranks, local/ differs between ranks, and grad/ is the mean over ranks of the summed local gradients
(to float rounding), for every recorded step. Prints one summary line; exit status 0 when all is well.
"""
import argparse
import json
import os
import struct
import sys

import torch

KINDS = {"local", "prior", "grad", "grad_step", "param_before", "param_after", "state", "buffer"}


def steps_log(rank_dir):
    """{step: its record's bytes} of rank_dir/steps.log (the whole-run steps), {} where there is none."""
    out, path = {}, os.path.join(rank_dir, "steps.log")
    if not os.path.exists(path):
        return out
    raw = open(path, "rb").read()
    at = 0
    while len(raw) - at >= 16:
        n, step = struct.unpack("<QQ", raw[at:at + 16])
        if n > len(raw) - at - 16:
            break  # cut short
        assert step not in out and all(step > s for s in out), (path, step)
        out[step] = raw[at + 16:at + 16 + n]
        at += 16 + n
    return out


def read_safetensors(path, raw=None):
    """({name: tensor}, metadata dict) of a file (or of its bytes), checking the header and the tiling of the data."""
    if raw is None:
        with open(path, "rb") as f:
            raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: truncated" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    spans = []
    tensors = {}
    for name, e in header.items():
        if e["dtype"] != "F32":
            raise ValueError("%s: %s is %s, not F32" % (path, name, e["dtype"]))
        b, end = e["data_offsets"]
        numel = 1
        for s in e["shape"]:
            numel *= s
        if end - b != 4 * numel:
            raise ValueError("%s: %s offsets %s do not hold shape %s" % (path, name, e["data_offsets"], e["shape"]))
        spans.append((b, end, name))
        buf = bytearray(data[b:end])
        t = torch.frombuffer(buf, dtype=torch.float32) if numel else torch.zeros(0)
        tensors[name] = t.reshape(e["shape"])
    pos = 0
    for b, end, name in sorted(spans):
        if b != pos:
            raise ValueError("%s: gap or overlap at %s (offset %d, expected %d)" % (path, name, b, pos))
        pos = end
    if pos != len(data):
        raise ValueError("%s: %d trailing data bytes" % (path, len(data) - pos))
    return tensors, json.loads(meta["ddplab"])


def load_run(run_dir):
    """[{"manifest": ..., "steps": {s: (tensors, meta)}}] per rank, checked."""
    m0 = json.load(open(os.path.join(run_dir, "rank0", "manifest.json")))
    ranks = []
    for r in range(m0["world_size"]):
        d = os.path.join(run_dir, "rank%d" % r)
        m = json.load(open(os.path.join(d, "manifest.json")))
        assert m["format"] == "ddplab-trace" and m["version"] == 1, d
        assert m["rank"] == r and m["run_id"] == m0["run_id"] and m["steps"] == m0["steps"], d
        assert [p["name"] for p in m["params"]] == [p["name"] for p in m0["params"]], d
        shapes = {p["name"]: p["shape"] for p in m["params"]}
        bshapes = {b["name"]: b["shape"] for b in m["buffers"]}
        np_ = len(m["params"])
        for g in m["optimizer"]["param_groups"]:
            assert all(0 <= i < np_ for i in g["params"]), d
        if m.get("first_ready_order") is not None:
            assert sorted(set(m["first_ready_order"])) == sorted(m["first_ready_order"]), d
        steps, log = {}, steps_log(d)
        for s in m["steps"]:
            p = os.path.join(d, "step%06d.safetensors" % s)
            tensors, meta = read_safetensors(p, None if os.path.exists(p) else log[s])
            assert meta["step"] == s and meta["rank"] == r and meta["run_id"] == m["run_id"], p
            for name, t in tensors.items():
                kind, rest = name.split("/", 1)
                assert kind in KINDS, (p, name)
                if kind == "buffer":
                    assert list(t.shape) == bshapes[rest], (p, name)
                    continue
                if kind == "local":
                    k, rest = rest.split("/", 1)
                    assert 0 <= int(k) < len(meta["backwards"]), (p, name)
                if kind == "state":
                    rest = rest.rsplit("/", 1)[0]
                assert list(t.shape) == shapes[rest], (p, name, list(t.shape), shapes[rest])
            for pp in m["params"]:
                assert "param_before/" + pp["name"] in tensors and "param_after/" + pp["name"] in tensors, p
            for bw in meta["backwards"]:
                assert all(0 <= i < np_ for i in bw["ready"]), p
            steps[s] = (tensors, meta)
        ranks.append({"manifest": m, "steps": steps})
    return ranks


def check_clean(ranks):
    """grad/ equal on all ranks, local/ differs, grad/ == mean of summed locals (close). Returns problems."""
    problems = []
    names = [p["name"] for p in ranks[0]["manifest"]["params"]]
    ws = len(ranks)
    ddp = ranks[0]["manifest"]["ddp"]
    hook = ddp["comm_hook"]
    rel = 2e-3 if hook == "fp16_compress" else 1e-5  # fp16 compression rounds each rank's gradient
    # PowerSGD approximates from start_powerSGD_iter on; before, it all-reduces like DDP.
    exact_until = ddp["comm_hook_state"].get("start_powerSGD_iter", 0) if hook == "powerSGD" else None
    differs = False
    for s in ranks[0]["steps"]:
        for n in names:
            g = [rk["steps"][s][0].get("grad/" + n) for rk in ranks]
            if any(x is None for x in g):
                continue
            for r in range(1, ws):
                if not torch.equal(g[r].view(torch.int32), g[0].view(torch.int32)):
                    problems.append("step %d %s: grad/ differs between rank 0 and rank %d" % (s, n, r))
            locs = []
            for rk in ranks:
                t, meta = rk["steps"][s]
                acc = None
                for k in range(len(meta["backwards"])):
                    x = t.get("local/%d/%s" % (k, n))
                    if x is not None:
                        acc = x.clone() if acc is None else acc + x
                locs.append(acc)
            if any(x is None for x in locs) or (exact_until is not None and s >= exact_until):
                continue
            if not all(torch.equal(locs[0], x) for x in locs[1:]):
                differs = True
            mean = sum(locs) / ws
            err = (mean - g[0]).abs().max().item()
            tol = rel * (1 + mean.abs().max().item())
            if err > tol:
                problems.append("step %d %s: grad/ is %.3g from the mean of the local gradients" % (s, n, err))
    if not differs:
        problems.append("local/ is the same on every rank (expected different data per rank)")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--clean", action="store_true")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    ranks = load_run(a.run_dir)
    m = ranks[0]["manifest"]
    ntens = sum(len(st[0]) for rk in ranks for st in rk["steps"].values())
    msg = "%s: %d ranks, steps %s, %d tensors, hook %s, buckets %s" % (
        a.run_dir, len(ranks), m["steps"], ntens, m["ddp"]["comm_hook"], m.get("buckets"))
    if a.v:
        for s, (t, meta) in sorted(ranks[0]["steps"].items()):
            print("rank0 step", s, json.dumps({k: v for k, v in meta.items() if k != "inputs"}),
                  "inputs", [len(x) for x in meta["inputs"]], sorted(t)[:3], "...")
    problems = check_clean(ranks) if a.clean else []
    for p in problems:
        print("  " + p)
    print(("FAIL " if problems else "ok ") + msg)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
