"""FSDP2 (torch 2.x `fully_shard`) as a learner writes it: fully_shard on every Linear and on the root, an
optimizer over the sharded parameters, DistributedSampler; traced with the same three lines as a DDP script.
The layers have 40, 33 and 5 rows, so at 2, 3 and 4 ranks some shards are short, and the last layer's bias is
empty on a rank at 4 (chunks of 2 rows: 2, 2, 1, none).

    --optimizer sgd|adamw    SGD with momentum 0.9 and weight decay (default), or AdamW
    --accumulate K           K micro-batches per step, set_requires_gradient_sync(False) on all but the last
    --clip C                 torch.nn.utils.clip_grad_norm_(model.parameters(), C) before each step
    --shard-dim1             shard_placement_fn: Shard(1) for each weight whose columns world_size divides
    --reduce-dtype bf16|fp16 MixedPrecisionPolicy(reduce_dtype=torch.bfloat16 or torch.float16)
    --param-dtype bf16       MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    --hsdp                   HSDP over a (2, world_size / 2) CPU device mesh: not modelled, a not-checked note
    --mistake optimizer_before_shard   the optimizer built over the parameters before fully_shard replaced them
    --mistake sync_off       set_requires_gradient_sync(False) once, for accumulation, and never set back
    --mistake sync_first     with --accumulate K: sync on each step's first micro-batch instead of its last
    --mistake clip_local     with --clip C: each rank clips by the norm of its own shards (p.grad.to_local())
    --fault hook,pre_hook,layout   (tests only) rank r's recorder fails at step 2 at the r-th point of the list (its
                             gradient hook, its FSDP forward pre-hook, its manifest's "fsdp"): one line per rank,
                             and the training goes on
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


def extra(p):
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--shard-dim1", action="store_true")
    p.add_argument("--hsdp", action="store_true")
    p.add_argument("--param-dtype", choices=["float32", "bf16"], default="float32")
    p.add_argument("--reduce-dtype", choices=["float32", "bf16", "fp16"], default="float32")
    p.add_argument("--fault", default="", help="comma-separated: hook, pre_hook, layout")
    p.add_argument("--mistake", choices=["", "optimizer_before_shard", "sync_off", "sync_first", "clip_local"], default="")


def make_optimizer(params, args):
    if args.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.05)
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=1e-3)


def inject_fault(where):
    """Makes the recorder's own code raise from step 2 on, at one of its FSDP2 points."""
    import ddplab_trace as T
    name = {"hook": "_on_grad_locked", "pre_hook": "_make_unshard_hook", "layout": "_fsdp_layout"}[where]
    original = getattr(T.DDPTrace, name)

    def bad(self, *a, **k):
        if self._step >= 2:
            raise RuntimeError("injected fault")
        return original(self, *a, **k)

    if where == "pre_hook":  # the hook the method makes fails, not the making
        def make(self, group):
            hook = original(self, group)

            def failing(module, args):
                if self._step >= 2 and not self._stopped:
                    try:
                        raise RuntimeError("injected fault")
                    except RuntimeError as e:
                        self._stop_for(e, "FSDP forward pre-hook")
                return hook(module, args)
            return failing
        setattr(T.DDPTrace, name, make)
    else:
        setattr(T.DDPTrace, name, bad)


def main(rank, world_size, args):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import Shard

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 12), torch.randint(0, 5, (96,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    model = nn.Sequential(nn.Linear(12, 40), nn.ReLU(), nn.Linear(40, 33), nn.Tanh(), nn.Linear(33, 5))
    early = make_optimizer(model.parameters(), args) if args.mistake == "optimizer_before_shard" else None
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if args.param_dtype == "bf16" else None,
                              reduce_dtype={"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.reduce_dtype))
    def dim1(p):
        return Shard(1) if p.dim() == 2 and p.shape[1] % world_size == 0 else None

    placement = {"shard_placement_fn": dim1} if args.shard_dim1 else {}
    if args.hsdp:
        from torch.distributed.device_mesh import init_device_mesh
        placement["mesh"] = init_device_mesh("cpu", (2, world_size // 2), mesh_dim_names=("replicate", "shard"))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mp_policy=mp, **placement)
    fully_shard(model, mp_policy=mp, **{k: v for k, v in placement.items() if k == "mesh"})
    optimizer = early or make_optimizer(model.parameters(), args)
    loss_fn = nn.CrossEntropyLoss()

    if args.fault:
        faults = args.fault.split(",")
        inject_fault(faults[rank % len(faults)])
    trace = DDPTrace(model, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step, micro = 0, 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            micro += 1
            last = micro % args.accumulate == 0
            first = micro % args.accumulate == 1 % args.accumulate
            sync = first if args.mistake == "sync_first" else last and args.mistake != "sync_off"
            model.set_requires_gradient_sync(sync)
            loss = loss_fn(model(x), y) / args.accumulate
            loss.backward()
            if not last:
                continue
            if args.clip and args.mistake == "clip_local":
                with torch.no_grad():
                    shards = [p.grad.to_local() for p in model.parameters() if p.grad is not None]
                    norm = torch.sqrt(sum((g * g).sum() for g in shards))
                    for g in shards:
                        g.mul_(torch.clamp(args.clip / (norm + 1e-6), max=1.0))
            elif args.clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    common.save_final_params({n: p.to_local().detach().clone() for n, p in model.named_parameters()}, args)


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=5, extra=extra))
