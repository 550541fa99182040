#!/usr/bin/python3
"""Measures, in torch 1.13 on Gloo (CPU, one process per rank), the facts about Join and ZeroRedundancyOptimizer
that the join goldens (and tests/golden/gpt's zero/join goldens) rely on; prints the evidence. Run from the
repository root:

    /usr/bin/python3 tests/golden/join/check_join_facts.py [a b c d]    # all by default

a  ZeRO's partition over parameter groups (nanoGPT's two AdamW groups, ws 2 and 3): measured
   _partition_parameters() vs two candidate algorithms (sizes accumulated across groups, or reset per group).
b  a joined rank with a communication hook (allreduce, fp16-compress, powersgd): what the hook is called with on
   the joined rank, what the active rank's gradient becomes, whether --join-divide changes it, PowerSGD's state.
c  Join([ddp, zero]): what a joined rank's ZeRO hook does (which .grad it steps with, its shard, the broadcasts).
d  one Join around all epochs: the collective sequence per rank, who broadcasts buffers, the final broadcast.

Each rank logs the Python-level collectives (dist.all_reduce, dist.broadcast, dist._broadcast_coalesced) it calls;
DDP's Reducer calls a registered hook's all-reduce through dist.all_reduce, so with --comm-hook allreduce the
bucket all-reduces show in the log too.
"""
import os
import sys

os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2',
                  ONEDNN_MAX_CPU_ISA='AVX2')
import datetime  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.distributed.algorithms.join import Join  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, 'sim'))


def spawn(fn, ws, *args):
    """Runs fn(rank, ws, *args) -> json-able on ws gloo ranks; returns the per-rank results."""
    work = tempfile.mkdtemp(prefix='check_join_facts.')
    mp.spawn(_entry, args=(fn, ws, work, args), nprocs=ws, join=True)
    out = []
    for r in range(ws):
        with open(os.path.join(work, f'{r}.json')) as f:
            out.append(json.load(f))
    return out


def _entry(rank, fn, ws, work, args):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method='file://' + os.path.join(work, 'rdv'), rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=60))
    try:
        res = fn(rank, ws, *args)
        with open(os.path.join(work, f'{rank}.json'), 'w') as f:
            json.dump(res, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def trace_collectives(log):
    """Wraps dist.all_reduce / broadcast / _broadcast_coalesced: appends one short string per call to log."""
    ar, bc, bcc = dist.all_reduce, dist.broadcast, dist._broadcast_coalesced

    def all_reduce(t, op=dist.ReduceOp.SUM, group=None, async_op=False):
        log.append(f'allreduce{"(max)" if op == dist.ReduceOp.MAX else ""} n={t.numel()} '
                   f'{"zeros" if not bool(t.any()) else "in=" + ("%g" % t.flatten()[0].item())}')
        return ar(t, op=op, group=group, async_op=async_op)

    def broadcast(tensor, src, group=None, async_op=False):  # ZeRO calls it with keywords
        log.append(f'broadcast src={src} n={tensor.numel()}')
        return bc(tensor, src, group=group, async_op=async_op)

    def broadcast_coalesced(pg, tensors, size, src):
        log.append(f'broadcast_coalesced src={src} tensors={len(tensors)}')
        return bcc(pg, tensors, size, src)
    dist.all_reduce, dist.broadcast, dist._broadcast_coalesced = all_reduce, broadcast, broadcast_coalesced


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batches(rank, n, seed=1):
    g = torch.Generator().manual_seed(seed * 100 + rank)
    return [(torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)) for _ in range(n)]


# ---------------------------------------------------------------- a: ZeRO partition over groups
def fact_a_rank(rank, ws):
    from gpt_model import GPT, GPTConfig
    from torch.distributed.optim import ZeroRedundancyOptimizer
    torch.manual_seed(1337)
    model = GPT(GPTConfig(76, 8, 2, 2, 16, 0.0, True, 'none', 0))
    params = [(n, p) for n, p in model.named_parameters()]
    groups = [{'params': [p for _, p in params if p.dim() >= 2], 'weight_decay': 0.1},
              {'params': [p for _, p in params if p.dim() < 2], 'weight_decay': 0.0}]
    zero = ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW, lr=1e-3)
    names = {id(p): n for n, p in params}
    measured = [[[names[id(p)] for p in g['params']] for g in gs] for gs in zero._partition_parameters()]
    numel = {n: p.numel() for n, p in params}
    group_names = [[names[id(p)] for p in g['params']] for g in groups]
    return {'measured': measured, 'numel': numel, 'groups': group_names}


def predict(group_names, numel, ws, accumulate):
    out = [[[] for _ in group_names] for _ in range(ws)]
    sizes = [0] * ws
    for gi, g in enumerate(group_names):
        if not accumulate:
            sizes = [0] * ws
        for n in sorted(g, key=lambda n: numel[n], reverse=True):  # stable: ties keep the group's order
            r = sizes.index(min(sizes))  # the first rank with the least
            out[r][gi].append(n)
            sizes[r] += numel[n]
    return out


def fact_a():
    print('a) ZeroRedundancyOptimizer._partition_parameters() over nanoGPT\'s two AdamW groups (tiny GPT C 16):')
    for ws in (2, 3):
        res = spawn(fact_a_rank, ws)[0]
        m = res['measured']
        acc = predict(res['groups'], res['numel'], ws, True)
        reset = predict(res['groups'], res['numel'], ws, False)
        print(f'   ws {ws}: measured floats per rank per group '
              f'{[[sum(res["numel"][n] for n in g) for g in gs] for gs in m]}; '
              f'== sizes accumulated across groups: {m == acc}; == sizes reset per group: {m == reset}')
        for r, gs in enumerate(m):
            print(f'     rank {r}: ' + ' | '.join(', '.join(f'{n}({res["numel"][n]})' for n in g) for g in gs))


# ---------------------------------------------------------------- b: joined rank with a hook
def fact_b_rank(rank, ws, hook_name, divide_initial):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    log = []
    model = mlp()
    ddp = DDP(model)
    calls = []
    if hook_name == 'powersgd':
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        inner = powerSGD_hook.powerSGD_hook
    else:
        state, inner = None, {'allreduce': default_hooks.allreduce_hook,
                              'fp16-compress': default_hooks.fp16_compress_hook}[hook_name]
    joined = {'v': False}

    def hook(st, bucket):
        rec = {'joined': joined['v'], 'index': bucket.index(), 'is_last': bucket.is_last(),
               'input_all_zero': not bool(bucket.buffer().any()), 'numel': bucket.buffer().numel()}
        if hook_name == 'powersgd':
            rec['iter_before'] = st.iter
            err = st.error_dict.get(bucket.index())
            rec['error_norm_before'] = None if err is None else float(err.norm())
        fut = inner(st, bucket)
        if hook_name == 'powersgd':
            def after(f):
                rec['iter_after'] = st.iter
                err = st.error_dict.get(bucket.index())
                rec['error_norm_after'] = None if err is None else float(err.norm())
                rec['result_norm'] = float(f.value().norm())
                return f.value()
            fut = fut.then(after)
        calls.append(rec)
        return fut
    ddp.register_comm_hook(state, hook)
    trace_collectives(log)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = batches(rank, 4 - 2 * rank)
    ratios = []
    with Join([ddp], divide_by_initial_world_size=divide_initial):
        for step, (x, y) in enumerate(data):
            # the local gradient of this batch, without DDP, on a copy
            ref = mlp()
            ref.load_state_dict(model.state_dict())
            F.mse_loss(ref(x), y).backward()
            log.append(f'-- step {step} forward')
            F.mse_loss(ddp(x), y).backward()
            ratios.append([float((p.grad / r.grad).nanmean()) for p, r in zip(model.parameters(), ref.parameters())])
            exact_half = all(torch.equal(p.grad, r.grad / ws) for p, r in zip(model.parameters(), ref.parameters()))
            ratios[-1] = {'mean_ratio_ddp_grad_over_local': [round(v, 6) for v in ratios[-1]],
                          'ddp_grad_bitwise_local_div_ws': exact_half}
            opt.step()
            opt.zero_grad(set_to_none=True)
        joined['v'] = True
        log.append('-- out of batches (joined)')
    log.append('-- after Join')
    return {'calls': calls, 'grads': ratios, 'log': log}


def fact_b():
    print('b) a joined rank with a comm hook (ws 2, MLP 8-16-4, rank 0: 4 steps, rank 1: 2 steps, SGD lr 0.1):')
    for hook in ('allreduce', 'fp16-compress', 'powersgd'):
        for divide_initial in (True, False):
            res = spawn(fact_b_rank, 2, hook, divide_initial)
            print(f'   hook {hook}, divide_by_initial_world_size={divide_initial}:')
            print(f'     rank 0 grads per step: {res[0]["grads"]}')
            for r in (0, 1):
                print(f'     rank {r} hook calls: {res[r]["calls"]}')
            if hook == 'allreduce' and divide_initial:
                for r in (0, 1):
                    print(f'     rank {r} collectives: {res[r]["log"]}')


# ---------------------------------------------------------------- c: joined rank with ZeRO
def fact_c_rank(rank, ws, set_to_none, optimizer):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    log = []
    model = mlp()
    ddp = DDP(model)
    opt_class, kw = ((torch.optim.SGD, {'lr': 0.1, 'momentum': 0.9}) if optimizer == 'sgd'
                     else (torch.optim.Adam, {'lr': 0.01}))
    zero = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=opt_class, **kw)
    names = {id(p): n for n, p in model.named_parameters()}
    own = [names[id(p)] for g in zero._partition_parameters()[rank] for p in g['params']]
    steps = []
    inner_step = zero.step
    joined = {'v': False}

    def step(*a, **k):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        grads = {n: (None if p.grad is None else ('zeros' if not bool(p.grad.any()) else 'nonzero'))
                 for n, p in model.named_parameters()}
        local_before = len(log)
        out = inner_step(*a, **k)
        steps.append({'joined': joined['v'], 'grads_at_step': grads,
                      'changed': [n for n, p in model.named_parameters() if not torch.equal(before[n], p)],
                      'collectives_in_step': log[local_before:],
                      'optim_state_steps': {names[id(p)]: (float(s['step']) if 'step' in s else None)
                                            for p, s in zero.optim.state.items()}})
        return out
    zero.step = step
    trace_collectives(log)
    data = batches(rank, 3 - rank)
    with Join([ddp, zero]):
        for x, y in data:
            log.append('-- forward')
            F.mse_loss(ddp(x), y).backward()
            zero.step()
            zero.zero_grad(set_to_none=set_to_none)
        joined['v'] = True
        log.append('-- out of batches (joined)')
    log.append('-- after Join')
    return {'own': own, 'steps': steps, 'log': log}


def fact_c():
    print('c) Join([ddp, zero]) (ws 2, MLP 8-16-4, rank 0: 3 steps, rank 1: 2 steps):')
    for optimizer in ('sgd', 'adam'):
        for set_to_none in (True, False):
            res = spawn(fact_c_rank, 2, set_to_none, optimizer)
            print(f'   {optimizer} (momentum 0.9 / Adam), zero_grad(set_to_none={set_to_none}):')
            for r in (0, 1):
                print(f'     rank {r} owns {res[r]["own"]}')
                for s in res[r]['steps']:
                    print(f'       step (joined={s["joined"]}): grads {set(s["grads_at_step"].values())}, '
                          f'changed {s["changed"]}, local optimizer steps {s["optim_state_steps"]}')
                    print(f'         collectives inside zero.step: {s["collectives_in_step"]}')
            if optimizer == 'sgd' and set_to_none:
                for r in (0, 1):
                    print(f'     rank {r} collectives: {res[r]["log"]}')


# ---------------------------------------------------------------- d: one Join around all epochs
def fact_d_rank(rank, ws, scope):
    log = []
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
    ddp = DDP(model)
    trace_collectives(log)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    epochs = 2
    per_epoch = 3 - rank  # rank 0: 3 batches per epoch, rank 1: 2

    def run_epoch(e):
        for b, (x, y) in enumerate(batches(rank, per_epoch, seed=e + 1)):
            log.append(f'-- epoch {e} batch {b}')
            F.mse_loss(ddp(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    if scope == 'run':
        with Join([ddp]):
            for e in range(epochs):
                run_epoch(e)
            log.append('-- out of batches (joined)')
    else:
        for e in range(epochs):
            with Join([ddp]):
                run_epoch(e)
                log.append(f'-- epoch {e}: out of batches (joined)')
    log.append('-- after Join')
    return {'log': log}


def fact_d():
    print('d) Join scope (ws 2, Linear-BatchNorm1d-ReLU-Linear, rank 0: 3 batches/epoch, rank 1: 2, 2 epochs):')
    for scope in ('run', 'epoch'):
        res = spawn(fact_d_rank, 2, scope)
        print(f'   scope {scope}:')
        for r in (0, 1):
            print(f'     rank {r}: {res[r]["log"]}')


def main():
    which = sys.argv[1:] or ['a', 'b', 'c', 'd']
    for w in which:
        {'a': fact_a, 'b': fact_b, 'c': fact_c, 'd': fact_d}[w]()
        sys.stdout.flush()


if __name__ == '__main__':
    main()
