"""Where a small model's recording time goes, part by part, inside a real training step.

bench/course_run.py's step (MLP 32-128-128-10, two micro-batches under no_sync(), clip_grad_norm_, AdamW) at
world size 1 in this one process (Gloo), untraced and then traced for --steps steps; while traced, each of the
recorder's parts below is wrapped in a timer (about 0.3 us a call of its own). Prints the loop's CPU time a
step untraced and traced, then each part's time a step (inclusive: a part's time holds its callees') and its
calls a step. A part timed in isolation runs from a warm cache and reads up to 2x faster than here.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/recorder_parts.py [--steps 2000]
"""
import argparse
import collections
import functools
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "verify"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import course_run  # noqa: E402  (this folder's: the same step, data and model)

import ddplab_trace.fast as FA  # noqa: E402
import ddplab_trace.flat as FL  # noqa: E402
import ddplab_trace.flat_steps as FS  # noqa: E402
import ddplab_trace.record as RC  # noqa: E402
import ddplab_trace.step as ST  # noqa: E402
import ddplab_trace.writer as WR  # noqa: E402
from ddplab_trace import DDPTrace  # noqa: E402

PARTS = [  # (owner, attribute, label)
    (ST._Step, "_step_wrapper", "optimizer.step wrapper (the step itself included)"),
    (ST._Step, "_snapshot_before", "  before the step"),
    (FS._FlatSteps, "_before_flat", "    parameters and .grad at the step"),
    (FS._FlatSteps, "_state_flat", "    optimizer state"),
    (ST._Step, "_write_step", "  after the step: the record"),
    (FS._FlatSteps, "_locals_flat_done", "    local gradients' sums and sample"),
    (FS._FlatSteps, "_after_flat", "    parameters and state after the step"),
    (ST, "_safetensors_parts", "    record header (JSON)"),
    (ST, "_tensor_bytes", "    tensors as bytes"),
    (ST._Step, "_wsum_tensors", "    weighted sums as tensors"),
    (FL._FlatSample, "kinds", "    sample as tensors"),
    (ST._Step, "_state_versions", "    optimizer state's versions"),
    (ST._Step, "_finish_write", "    last record listed"),
    (WR._StepWriter, "append", "    steps.log append"),
    (RC._Record, "_after_ddp", ".grad after DDP"),
    (RC._Record, "_on_grad_locked", "parameter hooks"),
    (RC._Record, "_forward_pre_hook", "forward pre-hook"),
    (RC, "_batch", "  batch fingerprints and NaN/inf check (_fast.c)"),
    (RC, "_fingerprints", "  batch fingerprints (numpy)"),
    (RC, "_input_nonfinite", "  batch NaN/inf check (numpy)"),
    (FA._FastBuf, "put_all", "(every) _fast.c pass over a kind"),
    (FA._FastBuf, "put", "(every) _fast.c pass over a local gradient"),
    (FL._Flat, "wsums", "(every) weighted sums (numpy)"),
    (FL._Flat, "digests", "(every) fold64 digests (numpy)"),
    (FL._FlatBuf, "put", "(every) copy into a flat buffer (numpy)"),
    (FL._FlatSample, "put", "(every) sample kept"),
]


def run(trace_dir, steps):
    """course_run's training for `steps` steps, traced into trace_dir unless it is None: CPU us a step."""
    sampler, loader, ddp, opt = course_run.build()
    trace = DDPTrace(ddp, opt, trace_dir) if trace_dir else None
    c0 = time.process_time()
    course_run.train(sampler, loader, ddp, opt, steps)
    if trace:
        trace.close()
    return (time.process_time() - c0) / steps * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2000)
    args = p.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    untraced = run(None, args.steps)
    spent, calls = collections.Counter(), collections.Counter()
    for owner, name, label in PARTS:
        f = getattr(owner, name)

        def timed(*a, _f=f, _label=label, **k):
            t = time.perf_counter_ns()
            try:
                return _f(*a, **k)
            finally:
                spent[_label] += time.perf_counter_ns() - t
                calls[_label] += 1
        setattr(owner, name, functools.wraps(f)(timed))
    work = tempfile.mkdtemp(prefix="ddplab_parts.")
    try:
        traced = run(os.path.join(work, "run"), args.steps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("recorder_parts: course_run's step at world size 1, %d steps: %.0f us CPU a step untraced, %.0f traced "
          "(+%.0f, %.2fx)" % (args.steps, untraced, traced, traced - untraced, traced / untraced))
    for _, _, label in PARTS:
        print("  %7.1f us a step  %5.1f calls  %s" % (spent[label] / 1e3 / args.steps, calls[label] / args.steps, label))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
