"""The recorder never breaks a run: faults injected into verify/ddplab_trace at each of its hook points, on a
small 2-rank Gloo run, must each leave exactly one stderr line per rank starting with "ddplab_trace:", a manifest
that says where and why the recording stopped, and final parameters bitwise equal to the untraced run's (with
the optimizer's own step called as often). Control cases (no fault) check what a clean recording holds:
data.json from the sampler's indices (num_workers 0 and 2 alike), Join's segments, model averaging, a closure,
non-float32 optimizer state, the script's own exceptions passing through.

    python tests/ddp_check/recorder_faults.py [CASE ...]

One line per case; exit status 0 when every case holds, 1 otherwise.
"""
import argparse
import contextlib
import errno
import io
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset, random_split

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "scripts"))
import common  # noqa: E402  (puts verify/ on sys.path)
from recorder_internals import T  # noqa: E402

STEPS = 6  # optimizer steps per run: 4 batches per rank per epoch, so two epochs


class UserError(Exception):
    pass


class CountingSGD(torch.optim.SGD):
    """SGD that counts the calls of its own step (the recorder must call it once per optimizer.step()), can
    raise the script's own error at a call, and can keep a float64 state tensor per parameter."""

    def __init__(self, params, raise_at=None, state64=False):
        super().__init__(params, lr=0.1, momentum=0.9)
        self.calls, self.raise_at, self.state64 = 0, raise_at, state64

    def step(self, closure=None):
        self.calls += 1
        if self.raise_at == self.calls:
            raise UserError("the optimizer's own error")
        out = super().step(closure)
        if self.state64:
            with torch.no_grad():
                for g in self.param_groups:
                    for p in g["params"]:
                        self.state[p]["ema64"] = p.detach().double()
        return out


def train(rank, world_size, cfg, run_dir, after_construct=None, before_close=None):
    """One run; returns (final parameters, optimizer step calls, user errors seen)."""
    torch.manual_seed(0)
    full = TensorDataset(torch.randn(40, 6), torch.randint(0, 3, (40,)))
    train_set, val_set = random_split(full, [32, 8], generator=torch.Generator().manual_seed(0))
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    workers = cfg.get("workers", 0)
    # Workers forked (a rank started by mp.spawn would spawn them: seconds of imports each); persistent ones
    # keep their iterator across epochs with a new sampler iterator each epoch.
    loader = DataLoader(train_set, batch_size=4, sampler=sampler, num_workers=workers,
                        multiprocessing_context="fork" if workers else None,
                        persistent_workers=cfg.get("persistent", False))
    val_loader = DataLoader(val_set, batch_size=4)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    hand = cfg.get("hand")  # a sync written by hand: no DDP, the script's own all-reduces ("async": async_op=True)
    ddp = model if hand else DDP(model)
    hook = cfg.get("hook")
    if hook == "allreduce":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif hook == "powerSGD":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
        state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD.powerSGD_hook)
    opt = CountingSGD(ddp.parameters(), raise_at=cfg.get("step_raises_at"), state64=cfg.get("state64", False))
    loss_fn = nn.CrossEntropyLoss()
    trace = None
    if run_dir is not None:
        trace = T.DDPTrace(ddp, opt, run_dir)
        if after_construct:
            after_construct(trace)
    averager = None
    if cfg.get("average"):
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
        averager = PeriodicModelAverager(period=2, warmup_steps=0)
    join = contextlib.nullcontext()
    if cfg.get("join"):
        from torch.distributed.algorithms.join import Join
        join = Join([ddp])
    step, user_errors = 0, 0
    with join:
        for epoch in range(100):
            sampler.set_epoch(epoch)
            for x, y in loader:
                def closure():
                    opt.zero_grad()
                    if cfg.get("closure_raises_at") == step:
                        raise UserError("the closure's own error")
                    loss = loss_fn(ddp(x), y)
                    loss.backward()
                    if hand:
                        works = [(dist.all_reduce(p.grad, async_op=hand == "async"), p) for p in ddp.parameters()]
                        for work, p in works:
                            if work is not None:
                                work.wait()
                            p.grad /= world_size
                    return loss
                try:
                    if cfg.get("closure") or "closure_raises_at" in cfg:
                        opt.step(closure)
                    else:
                        closure()
                        opt.step()
                except UserError:
                    user_errors += 1
                if averager is not None:
                    averager.average_parameters(ddp.parameters())
                step += 1
                if step == STEPS:
                    break
            with torch.no_grad():  # validation: its loader is recorded, not as training
                for x, _ in val_loader:
                    ddp(x)
            if step == STEPS:
                break
    if trace is not None:
        if before_close:
            before_close(trace)
        trace.close()
    final = {n: p.detach().clone() for n, p in getattr(ddp, "module", ddp).named_parameters()}
    return final, opt.calls, user_errors


# ----- faults -----
def owner(name):
    """The class of DDPTrace's parts (DDPTrace or one of its mixins) that defines the method."""
    return next(c for c in T.DDPTrace.__mro__ if name in c.__dict__)


def fail_method(name, at_step=1, once=False):
    """DDPTrace.<name> raises from step at_step on (once: only the first time)."""
    def inject():
        cls = owner(name)
        original = cls.__dict__[name]
        fired = []

        def bad(self, *args, **kwargs):
            if self._step >= at_step and not (once and fired):
                fired.append(True)
                raise RuntimeError("injected fault")
            return original(self, *args, **kwargs)

        setattr(cls, name, bad)
        return lambda: setattr(cls, name, original)
    return inject


def fail_function(name, make_bad):
    def inject():
        original = getattr(T, name)
        setattr(T, name, make_bad(original))
        return lambda: setattr(T, name, original)
    return inject


def open_step():
    return T._OPEN[-1]._step if T._OPEN else 0


def half_locals():
    """An unknown tensor kind from step 1 on: the recorder's copies of the local gradients come back float16."""
    def inject():
        cls = owner("_keep_local")
        original = cls.__dict__["_keep_local"]

        def _keep_local(self, k, i, grad):
            c = original(self, k, i, grad)
            return c.half() if self._step >= 1 else c

        cls._keep_local = _keep_local
        return lambda: setattr(cls, "_keep_local", original)
    return inject


def failing_sample():
    """The whole-run mode from step 2 on (FULL_STEPS 1: the least the recorder keeps whole is 2 steps), and the
    sample's gather failing in its first whole-run step (per tensor, in the parameter hook; laid flat, at the
    prior's in the hook or at the step's write)."""
    def inject():
        full, take = T.FULL_STEPS, T._Sample.__dict__["take"]
        put, put_tensors = T._FlatSample.__dict__["put"], T._FlatSample.__dict__["put_tensors"]
        T.FULL_STEPS = 1

        def bad(self, *args):
            raise RuntimeError("injected fault")

        T._Sample.take = T._FlatSample.put = T._FlatSample.put_tensors = bad  # per tensor, and laid flat

        def undo():
            T.FULL_STEPS = full
            T._Sample.take, T._FlatSample.put, T._FlatSample.put_tensors = take, put, put_tensors
        return undo
    return inject


def failing_wsums():
    """The whole-run mode from step 2 on, and its weighted sums failing there (per tensor, a local gradient's in
    the parameter hook; laid flat, at the step's write or after DDP; read in place by _fast.c, in its pass)."""
    def inject():
        full, wsums, flat, fast = T.FULL_STEPS, T._wsums, T._Flat.__dict__["wsums"], T._FastBuf.__dict__["_pass"]
        T.FULL_STEPS = 1

        def bad(*args, **kwargs):
            raise RuntimeError("injected fault")

        def bad_pass(self, mode):
            if mode & T.WSUM:
                raise RuntimeError("injected fault")
            return fast(self, mode)

        T._wsums = T._Flat.wsums = bad  # per tensor, and laid flat
        T._FastBuf._pass = bad_pass

        def undo():
            T.FULL_STEPS = full
            T._wsums, T._Flat.wsums, T._FastBuf._pass = wsums, flat, fast
        return undo
    return inject


def failing_digests(original):
    def _digest(t):
        if open_step() >= 1:
            raise ValueError("injected fault")
        return original(t)
    return _digest


def log_full_once():
    """The disk is full when the first whole-run step is appended to steps.log (FULL_STEPS 1: from step 2)."""
    def inject():
        full, original = T.FULL_STEPS, T._StepWriter.__dict__["_append_write"]
        T.FULL_STEPS = 1

        def _append_write(self, parts, total):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "steps.log")

        T._StepWriter._append_write = _append_write

        def undo():
            T.FULL_STEPS = full
            T._StepWriter._append_write = original
        return undo
    return inject


def disk_full_once():
    """The disk is full when step 1's file is written (a small one: in the training's thread)."""
    def inject():
        original = T._StepWriter.__dict__["_write"]
        fired = []

        def _write(self, tmp, arena, total):
            if not fired and os.path.basename(tmp).startswith(".step") and int(os.path.basename(tmp)[5:11]) >= 1:
                fired.append(True)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), tmp)
            return original(self, tmp, arena, total)
        T._StepWriter._write = _write
        return lambda: setattr(T._StepWriter, "_write", original)
    return inject


class Raising(dict):
    def __setitem__(self, key, value):
        raise RuntimeError("injected fault")


def fail_mapping(name):
    def inject():
        original = getattr(T, name)
        setattr(T, name, Raising())
        return lambda: setattr(T, name, original)
    return inject


def unwritable_dir(trace):  # after DDPTrace(): the rank directory becomes a file (root ignores chmod)
    os.rename(trace.dir, trace.dir + ".away")
    open(trace.dir, "w").close()


def writable_again(trace):
    os.remove(trace.dir)
    os.rename(trace.dir + ".away", trace.dir)


def raising_join_event():
    raise RuntimeError("injected fault")


# name, config, inject, (step, why) expected in "stopped" (None: not stopped), steps recorded, extra check
CASES = [
    ("parameter_hook", {}, fail_method("_on_grad_locked"), (1, "parameter hook"), 1),
    ("forward_pre_hook", {}, fail_method("_forward_pre_hook_body"), (1, "forward pre-hook"), 1),
    ("end_of_backward_callback", {}, fail_method("_end_of_backward_body"), (1, "end-of-backward callback"), 1),
    ("after_ddp_callback", {}, fail_method("_after_ddp_body"), (1, "after-DDP callback"), 1),
    ("step_bookkeeping", {}, fail_method("_before_step"), (1, "optimizer.step wrapper"), 1),
    ("step_snapshot", {}, fail_method("_snapshot_before"), (1, "optimizer.step wrapper"), 1),
    ("step_snapshot_in_closure", {"closure": True}, fail_method("_snapshot_before"), (1, "optimizer.step wrapper"), 1),
    ("step_write", {}, fail_method("_write_step"), (1, "optimizer.step wrapper"), 1),
    # zero_grad() on the optimizer, wrapped to see a clear between two backwards of one step
    ("zero_grad_wrapper", {}, fail_method("_on_zero_grad_body"), (1, "zero_grad wrapper"), 1),
    # step 0's file is listed when step 1 is written (the writer thread wrote it meanwhile): that manifest fails
    ("manifest_writer", {}, fail_method("_manifest", once=True), (1, "manifest writer"), 1),
    ("close", {}, fail_method("_detach", at_step=0), (STEPS, "close()"), STEPS),
    ("unknown_tensor_kind", {}, half_locals(), (1, "unknown tensor kind"), 1),
    ("disk_full", {}, disk_full_once(), (1, "No space left on device"), 1),
    ("whole_run_sample", {}, failing_sample(), (2, "injected fault"), 2),
    ("whole_run_wsum", {}, failing_wsums(), (2, "injected fault"), 2),
    ("disk_full_log", {}, log_full_once(), (2, "No space left on device"), 2),
    # the digests of what ddp_check predicts, taken from step 1 on (the first step keeps every value)
    ("digest", {}, fail_function("_digest", failing_digests), (1, "after-DDP callback"), 1),
    ("unwritable_run_dir", {"after": unwritable_dir, "before_close": writable_again}, None, (0, "cannot write"), 0),
    ("constructor_setup", {}, fail_function("_sqrt_is_ieee", lambda o: lambda d: 1 / 0), (0, "DDPTrace() setup"), 0),
    # what the model is (DDP, replicate(), a framework's wrapper): a fault there leaves nothing recorded
    ("model_unwrap", {}, fail_function("_what_model", lambda o: lambda m: 1 / 0), (0, "DDPTrace() setup"), 0),
    ("register_comm_hook_spy", {"hook": "allreduce"}, fail_mapping("_REGISTERED_HOOKS"),
     (0, "register_comm_hook spy"), 0),
    ("powersgd_state_spy", {"hook": "powerSGD"}, fail_mapping("_POWERSGD_SEEDS"), (0, "PowerSGDState spy"), 0),
    ("join_spy", {"join": True}, fail_function("_on_join_event", lambda o: raising_join_event), (0, "Join spy"), 0),
    ("averaging_spy", {"average": True}, fail_method("_on_averaged"), (1, "model averaging spy"), 1),
    ("dataloader_init_spy", {}, fail_mapping("_ITER_LOADER"), (0, "DataLoader spy"), 0),
    ("dataloader_index_spy", {}, fail_method("_data_on_index"), (1, "DataLoader spy"), 1),
    # two workers prefetch all 4 batches of an epoch at iter(): the next index is fetched at step 4
    ("dataloader_index_spy_workers", {"workers": 2}, fail_method("_data_on_index"), (4, "DataLoader spy"), 4),
    ("dataloader_yield_spy", {}, fail_method("_data_on_yield"), (1, "DataLoader spy"), 1),
    # a sync written by hand: its collectives' spy, and Work.wait's (the first result had of an async call)
    ("hand_collective_spy", {"hand": "sync"}, fail_method("_collective_called"), (1, "collective spy (all_reduce)"), 1),
    ("hand_wait_spy", {"hand": "async"}, fail_method("_collective_done"), (1, "Work.wait spy"), 1),
    # controls: no fault
    ("clean", {}, None, None, STEPS),
    ("clean_workers", {"workers": 2}, None, None, STEPS),
    ("clean_persistent_workers", {"workers": 2, "persistent": True}, None, None, STEPS),
    ("clean_closure", {"closure": True}, None, None, STEPS),
    ("clean_join", {"join": True}, None, None, STEPS),
    ("clean_averaging", {"average": True}, None, None, STEPS),
    ("clean_powersgd", {"hook": "powerSGD"}, None, None, STEPS),
    ("float64_optimizer_state", {"state64": True}, None, None, STEPS),
    ("closure_raises", {"closure_raises_at": 2}, None, None, STEPS - 1),
    ("optimizer_step_raises", {"step_raises_at": 3}, None, None, STEPS - 1),
]


def step_metadata(path):
    """A step's metadata, from its file or (a whole-run step) its record in steps.log."""
    if os.path.exists(path):
        with open(path, "rb") as f:
            raw = f.read()
    else:
        from read_trace import steps_log
        raw = steps_log(os.path.dirname(path))[int(os.path.basename(path)[4:10])]
    n = int.from_bytes(raw[:8], "little")
    return json.loads(json.loads(raw[8:8 + n])["__metadata__"]["ddplab"])


def check_clean(name, cfg, rank_dir, manifest, data, errors_seen, reference):
    """What a recording without a fault holds; returns a problem or None."""
    steps = manifest["steps"]
    metas = [step_metadata(os.path.join(rank_dir, "step%06d.safetensors" % s)) for s in steps]
    loaders = data["loaders"]
    if len(loaders) != 2:
        return "data.json has %d loaders, want 2 (training, validation)" % len(loaders)
    tr, val = loaders
    if tr["base"] != "TensorDataset/40" or tr["dataset"] != "Subset" or tr["subset_len"] != 32:
        return "data.json's training loader: %s" % {k: tr[k] for k in ("dataset", "base", "subset_len")}
    if tr["sampler"]["type"] != "DistributedSampler" or [e["epoch"] for e in tr["epochs"]] != [0, 1]:
        return "data.json's training sampler/epochs: %s %s" % (tr["sampler"], [e["epoch"] for e in tr["epochs"]])
    if [len(e["indices"]) for e in tr["epochs"]] != [16, 8] or not all(e["training"] for e in tr["epochs"]):
        return "data.json's training epochs: %s" % tr["epochs"]
    # a step that raised is no step: the counter goes on from where it was
    want = [(0, 2), (3, 4)] if errors_seen else [(0, 3), (4, 5)]
    if [(e["first_step"], e["last_step"]) for e in tr["epochs"]] != want:
        return "data.json's first/last steps: %s" % [(e["first_step"], e["last_step"]) for e in tr["epochs"]]
    if any(e["training"] or e["first_step"] is not None for e in val["epochs"]) or len(val["epochs"]) != 2:
        return "data.json's validation loader: %s" % val["epochs"]
    if tr["subset_digest"] == val["subset_digest"] or set(tr["epochs"][0]["indices"]) & set(val["epochs"][0]["indices"]):
        return "training and validation subsets overlap"
    if name == "clean":
        reference["data"] = data
    if cfg.get("workers") and "data" in reference and data != reference["data"]:
        return "data.json with num_workers=2 differs from num_workers=0's"
    if [m["segment"] for m in metas] != [[0, k] for k in steps] and not cfg.get("join"):
        return "segments %s" % [m["segment"] for m in metas]
    if cfg.get("join"):
        if manifest["join"] is not True or [m["segment"] for m in metas] != [[1, k] for k in steps]:
            return "Join: manifest join %s, segments %s" % (manifest["join"], [m["segment"] for m in metas])
        if any(m.get("join") != {"divide_by_initial_world_size": True} for m in metas):
            return "Join: step metadata %s" % [m.get("join") for m in metas]
    elif manifest["join"] is not False or any("join" in m for m in metas):
        return "join recorded without Join"
    want_avg = [{"after_step": s, "group_size": 2} for s in (0, 2, 4)] if cfg.get("average") else []
    if manifest["averaging"] != want_avg:
        return "averaging %s, want %s" % (manifest["averaging"], want_avg)
    if cfg.get("hook") == "powerSGD":
        d = manifest["ddp"]
        if d["comm_hook"] != "powerSGD" or d["comm_hook_state"].get("random_seed") != 0 or \
                not d.get("comm_hook_module", "").endswith("powerSGD_hook"):
            return "PowerSGD hook recorded as %s" % d
    if cfg.get("state64"):
        if any(m.get("state_skipped") != [{"name": n, "key": "ema64", "dtype": "float64"}
                                          for n in ("0.weight", "0.bias", "2.weight", "2.bias")]
               for m in metas[1:]):
            return "float64 state not noted: %s" % [m.get("state_skipped") for m in metas]
    elif any("state_skipped" in m for m in metas):
        return "state_skipped without float64 state"
    if ("closure_raises_at" in cfg or "step_raises_at" in cfg) and errors_seen != 1:
        return "the script's own error was seen %d times, want 1" % errors_seen
    opt = manifest["optimizer"]
    if opt["missing_params"] or opt["missing_unchecked"] or opt["foreign_params"]:
        return "optimizer coverage %s" % opt
    return None


def run_case(rank, world_size, case, tmp, baselines, reference):
    name, cfg, inject, stopped, n_recorded = case
    key = json.dumps({k: v for k, v in cfg.items() if k not in ("after", "before_close")}, sort_keys=True)
    if key not in baselines:
        baselines[key] = train(rank, world_size, cfg, None)
    want_params, want_calls, want_errors = baselines[key]
    run_dir = os.path.join(tmp, name)
    undo = inject() if inject else None
    captured = io.StringIO()
    saved_stderr = sys.stderr
    sys.stderr = captured
    try:
        got_params, got_calls, got_errors = train(rank, world_size, cfg, run_dir, cfg.get("after"),
                                                  cfg.get("before_close"))
    except Exception as e:  # noqa: BLE001 - the run broke: that is the failure
        return "the traced run raised %s: %s" % (type(e).__name__, e)
    finally:
        sys.stderr = saved_stderr
        if undo:
            undo()
        del T._PENDING_STOP[:]
    problems = []
    for n in want_params:
        if not torch.equal(want_params[n].view(torch.uint8), got_params[n].view(torch.uint8)):
            problems.append("%s differs from the untraced run" % n)
    if (got_calls, got_errors) != (want_calls, want_errors):
        problems.append("optimizer step called %d times (untraced %d)" % (got_calls, want_calls))
    lines = [ln for ln in captured.getvalue().splitlines() if ln.startswith("ddplab_trace:")]
    if len(lines) != (1 if stopped else 0):
        problems.append("%d ddplab_trace lines on stderr: %s" % (len(lines), lines))
    rank_dir = os.path.join(run_dir, "rank%d" % rank)
    try:
        with open(os.path.join(rank_dir, "manifest.json")) as f:
            manifest = json.load(f)
        with open(os.path.join(rank_dir, "data.json")) as f:
            data = json.load(f)
    except Exception as e:  # noqa: BLE001
        return "; ".join(problems + ["no readable manifest/data.json: %s" % e])
    if manifest["complete"] is not True:
        problems.append("manifest not complete")
    if manifest["steps"] != list(range(n_recorded)):
        problems.append("steps %s, want %s" % (manifest["steps"], list(range(n_recorded))))
    got_stop = manifest["stopped"]
    if stopped is None:
        if got_stop is not None:
            problems.append("stopped %s" % got_stop)
        else:
            why = check_clean(name, cfg, rank_dir, manifest, data, got_errors, reference)
            if why:
                problems.append(why)
    elif got_stop is None or got_stop["step"] != stopped[0] or stopped[1] not in got_stop["why"]:
        problems.append("stopped %s, want step %d and why with '%s'" % (got_stop, stopped[0], stopped[1]))
    elif not lines[0].startswith("ddplab_trace: %s at step %d; recording stopped" % (got_stop["why"], stopped[0])):
        problems.append("stderr line %r does not say the manifest's why and step" % lines[0])
    return "; ".join(problems) or None


def allreduce_hook(state, bucket):  # a script's own hook that happens to share a name with torch's
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    return default_hooks.allreduce_hook(state, bucket)


def hook_kinds(rank, world_size, tmp):
    """Each comm hook torch ships, registered as scripts do, recorded with its kind (DDPTrace() then close(), no
    step: the kinds are read, not run); returns a problem or None."""
    from torch.distributed.algorithms import ddp_comm_hooks as H
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as default
    from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as local
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    from torch.distributed.algorithms.ddp_comm_hooks import quantization_hooks as quant

    torch_mod = "torch.distributed.algorithms.ddp_comm_hooks."
    psgd_state = {"matrix_approximation_rank": 1, "start_powerSGD_iter": 2, "random_seed": 0}
    groups = [dist.new_group([r]) for r in range(world_size)]  # collectives: every rank makes every group
    sub = groups[rank]
    cases = [  # name, register(ddp), kind, module, inner, comm_hook_state items that must be there
        ("allreduce", lambda d: d.register_comm_hook(None, default.allreduce_hook), "allreduce", "default_hooks",
         None, {}),
        ("fp16", lambda d: d.register_comm_hook(None, default.fp16_compress_hook), "fp16_compress", "default_hooks",
         None, {}),
        ("bf16", lambda d: d.register_comm_hook(None, default.bf16_compress_hook), "bf16_compress", "default_hooks",
         None, {}),
        ("powerSGD", lambda d: d.register_comm_hook(psgd.PowerSGDState(None, 1, 2), psgd.powerSGD_hook), "powerSGD",
         "powerSGD_hook", None, psgd_state),
        ("batched_powerSGD", lambda d: d.register_comm_hook(psgd.PowerSGDState(None, 1, 2), psgd.batched_powerSGD_hook),
         "batched_powerSGD", "powerSGD_hook", None, psgd_state),
        ("noop", lambda d: d.register_comm_hook(None, H.debugging.noop_hook), "noop", "debugging_hooks", None, {}),
        ("post_localSGD", lambda d: d.register_comm_hook(local.PostLocalSGDState(None, None, 3), local.post_localSGD_hook),
         "post_localSGD", "post_localSGD_hook", None,
         {"start_localSGD_iter": 3, "iter": 0, "post_local_gradient_allreduce": True, "subgroup_size": None}),
        ("post_localSGD_subgroup", lambda d: d.register_comm_hook(local.PostLocalSGDState(None, sub, 2, False),
                                                                  local.post_localSGD_hook),
         "post_localSGD", "post_localSGD_hook", None,
         {"start_localSGD_iter": 2, "post_local_gradient_allreduce": False, "subgroup_size": 1}),
        ("fp16_wrapper", lambda d: d.register_comm_hook(psgd.PowerSGDState(None, 1, 2),
                                                        default.fp16_compress_wrapper(psgd.powerSGD_hook)),
         "fp16_compress_wrapper", "default_hooks", "powerSGD", psgd_state),
        ("bf16_wrapper", lambda d: d.register_comm_hook(None, default.bf16_compress_wrapper(default.allreduce_hook)),
         "bf16_compress_wrapper", "default_hooks", "allreduce", {}),
        ("quantization_pertensor", lambda d: d.register_comm_hook(None, quant.quantization_pertensor_hook),
         "quantization_pertensor", "quantization_hooks", None, {}),
        ("quantization_perchannel", lambda d: d.register_comm_hook(None, quant.quantization_perchannel_hook),
         "quantization_perchannel", "quantization_hooks", None, {}),
        ("DDPCommHookType.BF16_COMPRESS", lambda d: H.register_ddp_comm_hook(H.DDPCommHookType.BF16_COMPRESS, d),
         "bf16_compress", "default_hooks", None, {}),
        ("DDPCommHookType.BATCHED_POWER_SGD",
         lambda d: H.register_ddp_comm_hook(H.DDPCommHookType.BATCHED_POWER_SGD, d), "batched_powerSGD",
         "powerSGD_hook", None, {"matrix_approximation_rank": 1}),
        ("own_hook_named_allreduce_hook", lambda d: d.register_comm_hook(None, allreduce_hook), "allreduce_hook",
         None, None, {}),
    ]
    problems, refused = [], []
    for i, (name, register, kind, module, inner, state) in enumerate(cases):
        torch.manual_seed(0)
        ddp = DDP(nn.Linear(4, 2))
        try:
            register(ddp)
        except (AttributeError, TypeError) as e:
            # torch's own refusals: 1.13's bf16 hooks want CUDA and NCCL (torch refuses a functools.partial
            # hook too: it reads hook.__name__; DDPCommHookType's partials register the function itself)
            refused.append("%s (%s)" % (name, str(e).splitlines()[0][:60]))
            continue
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        T.DDPTrace(ddp, opt, os.path.join(tmp, "hooks%d" % i)).close()
        with open(os.path.join(tmp, "hooks%d" % i, "rank%d" % rank, "manifest.json")) as f:
            d = json.load(f)["ddp"]
        got_module = d.get("comm_hook_module") or ""
        if d["comm_hook"] != kind or d.get("comm_hook_inner") != inner or \
                (module and got_module != torch_mod + module) or (not module and got_module.startswith(torch_mod)) or \
                any(d["comm_hook_state"].get(k, "absent") != v for k, v in state.items()):
            problems.append("%s recorded as %s" % (name, {k: v for k, v in d.items() if k.startswith("comm_hook")}))
    if rank == 0 and refused:
        print("comm_hook_kinds: torch %s refused %s" % (torch.__version__, "; ".join(refused)), flush=True)
    if len(refused) > 3:
        problems.append("torch refused %d hooks" % len(refused))
    return "; ".join(problems) or None


def main(rank, world_size, args):
    baselines, reference, results = {}, {}, []
    with tempfile.TemporaryDirectory(prefix="ddplab_faults_") as tmp:
        for case in CASES:
            if args.cases and case[0] not in args.cases:
                continue
            # Each rank writes its rank{r} under its own temporary directory (DDPTrace shares the run id itself).
            t0 = time.time()
            problem = run_case(rank, world_size, case, tmp, baselines, reference)
            everyone = [None] * world_size
            dist.all_gather_object(everyone, problem)
            results.append((case[0], everyone, time.time() - t0))
        if not args.cases or "comm_hook_kinds" in args.cases:
            t0 = time.time()
            problem = hook_kinds(rank, world_size, tmp)
            everyone = [None] * world_size
            dist.all_gather_object(everyone, problem)
            results.append(("comm_hook_kinds", everyone, time.time() - t0))
    if rank == 0:
        with open(args.result, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", help="run only these cases")
    a = ap.parse_args()
    names = [c[0] for c in CASES] + ["comm_hook_kinds"]
    unknown = [c for c in a.cases if c not in names]
    if unknown:
        ap.error("unknown cases %s (known: %s)" % (unknown, " ".join(names)))
    with tempfile.TemporaryDirectory(prefix="ddplab_faults_result_") as out:
        args = argparse.Namespace(world_size=2, cases=a.cases, result=os.path.join(out, "result.json"))
        common.launch(main, args)
        with open(args.result) as f:
            results = json.load(f)
    failed = 0
    for name, per_rank, seconds in results:
        bad = ["rank %d: %s" % (r, p) for r, p in enumerate(per_rank) if p]
        failed += bool(bad)
        print("%s %-30s %s (%.1f s)" % ("FAIL" if bad else "ok  ", name, "; ".join(bad) if bad else
                                        "training bitwise as untraced; recorder as expected", seconds))
    print("%d of %d cases failed" % (failed, len(results)) if failed else "all %d cases hold" % len(results))
    sys.exit(1 if failed else 0)
