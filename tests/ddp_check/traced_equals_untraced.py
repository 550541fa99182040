"""DDPTrace must not change a bit of the run: runs each learner-style script of scripts/ twice, with and
without the trace, and compares every rank's final parameters bitwise.

    /usr/bin/python3 tests/ddp_check/traced_equals_untraced.py [--all] [--every K] [SCRIPT ...]

Without names: the clean scripts (--all: every script; under torch 1.13 the torch 2.x-only ones skip). One line
per script; exit status 0 when every script's parameters are bitwise equal, 1 otherwise.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "scripts")
CLEAN = ["mlp_sgd", "cnn_bn_adam", "resnet_adamw", "transformer_sgd", "nosync", "find_unused", "bucket_view",
         "fp16_hook", "powersgd_hook", "small_buckets", "foreach_allreduce", "repeats_clean", "join_uneven",
         "fp16_wrapper", "hook_type", "noop_hook", "post_localsgd", "powersgd_rank4", "static_graph_unused",
         "all_optimizers", "schedulers", "tutorial_peek", "nanogpt_batches", "dcgan", "measured_order",
         "cnn_channels_last", "long_run"]  # long_run: 200 steps, the whole-run mode after the first 10
# torch 1.13 cannot run these on CPU (each script's docstring says why): skipped there.
TORCH2_ONLY = ["bf16_hook", "bf16_wrapper", "quantization_pertensor", "quantization_perchannel"]
MISTAKES = ["no_sampler", "no_set_epoch", "overlapping", "broadcast_buffers_off", "clip_grad", "unused",
            "diverge_grads", "diverge_rescale", "diverge_optimizer", "diverge_outside", "sum_hook", "mingpt_split",
            "sampler_seed_rank", "ce_single_column", "deepcopy_optimizer", "nosync_always"]
# Not here: module_call.py (its run ends when DDP's process group times out: no final parameters) and
# batched_powersgd.py (torch's own batched_powerSGD_hook fails its assertion at the first compressed step).
# The options a script needs to be repeatable: mingpt_split seeds each rank (else a fresh process's random seed).
EXTRA = {"mingpt_split": ["--seed", "1"]}
# Names that run a script with options (torch 2.x's composable APIs; a model that is not DDP at all).
VARIANTS = {"replicate": ("composable", ["--api", "replicate"]), "fully_shard": ("composable", ["--api", "fully_shard"]),
            "not_ddp": ("composable", ["--api", "none"]),
            "fsdp2_accumulate": ("fsdp2_mlp", ["--world-size", "4", "--optimizer", "adamw", "--accumulate", "2",
                                               "--clip", "1.0"]),
            # The recorder's health probes: a hook on the wrapped module, isfinite on every tensor, the digests of
            # the parameters DDP does not reduce, a channels_last model's strides.
            "health_module_call": ("run_health", ["--mistake", "module_call"]),
            "health_unfreeze": ("run_health", ["--mistake", "unfreeze"]),
            "health_nan_input": ("run_health", ["--mistake", "nan_input"])}
TORCH2_ONLY += ["replicate", "fully_shard", "fabric_ddp", "accelerate_ddp", "fsdp2_mlp",
                "fsdp2_accumulate"]  # torch 2.x's APIs, Lightning, accelerate
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def run(name, extra):
    script, options = VARIANTS.get(name, (name, []))
    cmd = [sys.executable, os.path.join(SCRIPTS, script + ".py")] + options + extra
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if p.returncode != 0:
        raise RuntimeError("%s failed (exit %d):\n%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:]))


def bitwise_equal(a, b):
    if a.keys() != b.keys():
        return "different ranks"
    for r in a:
        if a[r].keys() != b[r].keys():
            return "rank %s: different parameter names" % r
        for n in a[r]:
            x, y = a[r][n], b[r][n]
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)):
                return "rank %s %s differs (max |diff| %.3g)" % (r, n, (x - y).abs().max().item())
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scripts", nargs="*")
    ap.add_argument("--all", action="store_true", help="the mistake scripts too")
    ap.add_argument("--every", type=int, default=1)
    a = ap.parse_args()
    names = a.scripts or (CLEAN + TORCH2_ONLY + MISTAKES if a.all else CLEAN + TORCH2_ONLY)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="ddplab_traced_") as tmp:
        for name in names:
            if name in TORCH2_ONLY and not TORCH2:
                print("skip %-22s torch %s lacks it or cannot run it on CPU" % (name, torch.__version__))
                continue
            plain, traced = os.path.join(tmp, name + ".plain.pt"), os.path.join(tmp, name + ".traced.pt")
            try:
                t0 = time.time()
                run(name, ["--no-trace", "--final", plain] + EXTRA.get(name, []))
                t1 = time.time()
                run(name, ["--out", os.path.join(tmp, name), "--every", str(a.every), "--final", traced]
                    + EXTRA.get(name, []))
                t2 = time.time()
                why = bitwise_equal(torch.load(plain, weights_only=True), torch.load(traced, weights_only=True))
            except Exception as e:  # noqa: BLE001 - one line per script, whatever went wrong
                lines = [x for x in str(e).splitlines() if x.strip()]
                why = lines[0] + (" ... " + lines[-1].strip() if len(lines) > 1 else "")
                t0 = t1 = t2 = 0.0
            if why:
                failed += 1
                print("FAIL %-22s %s" % (name, why))
            else:
                print("ok   %-22s bitwise equal on every rank (untraced %.1fs, traced %.1fs)"
                      % (name, t1 - t0, t2 - t1))
            sys.stdout.flush()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
