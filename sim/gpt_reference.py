#!/usr/bin/python3
"""The PyTorch oracle for issue 17's tiny GPT: REAL torch 1.13 DistributedDataParallel on CPU over Gloo.

World-size processes (torch.multiprocessing.spawn), one thread each, rendezvous through a TCPStore the parent
opens on a free localhost port; every collective has a timeout (COLLECTIVE_TIMEOUT_S) and the whole run a
wall-clock limit (GPT_REFERENCE_TIMEOUT). The model, data and optimizer are sim/gpt_model.py (nanoGPT's shape,
docs/tiny_gpt.md); the training loop is nanoGPT train.py's (below, `train`). Flags are those
docs/tiny_gpt.md lists. With --dump-params FILE the parent writes one JSON (atomically), see tests/golden/gpt/README.md:

    /usr/bin/python3 sim/gpt_reference.py --world-size 2 --steps 4 --dump-params out.json
    /usr/bin/python3 sim/gpt_reference.py --single --dump-params first_step.json   # one process, no DDP

When torch raises (the aux head unused with --find-unused-parameters false), each rank records the message,
the step, micro-step and phase where it was raised, and the parameters at that moment; the run still exits 0.
Floats are float32 values as their shortest round-trip decimal (strtof reads back the exact float32).
"""
import os
import sys

# Pinned before torch loads, as tests/golden/make_goldens.py pins them (assigned, so nothing exported leaks
# in): OpenBLAS's Prescott kernels, one BLAS thread, ATen's AVX2 kernels, oneDNN capped at AVX2. The spawned
# ranks inherit them. DETAIL makes DDP's unused-parameter error name the parameters (set it to OFF or INFO
# in the environment to see what a user sees by default); it does not change any value (checked by
# tests/golden/gpt/check_facts.py).
os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2',
                  ONEDNN_MAX_CPU_ISA='AVX2')
os.environ.setdefault('TORCH_DISTRIBUTED_DEBUG', 'DETAIL')

import argparse  # noqa: E402
import contextlib  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from comm_hooks import add_comm_hook_flags, register_comm_hook  # noqa: E402
from gpt_model import GPT, GPTConfig, TextData, aux_used, configure_optimizer  # noqa: E402

TIMEOUT_S = float(os.environ.get('GPT_REFERENCE_TIMEOUT', '600'))
COLLECTIVE_TIMEOUT_S = 60
MAX_WORLD_SIZE = 16
TIED = {'lm_head.weight': 'transformer.wte.weight'}


def bool_flag(s):
    if s not in ('true', 'false'):
        raise argparse.ArgumentTypeError(f'expected true or false, got {s!r}')
    return s == 'true'


def betas_flag(s):
    try:
        b = tuple(float(v) for v in s.split(','))
    except ValueError:
        b = ()
    if len(b) != 2 or not all(0.0 <= v < 1.0 for v in b):
        raise argparse.ArgumentTypeError(f'expected two numbers in [0, 1) like 0.9,0.95, got {s!r}')
    return b


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line naming what is wrong, exit 2 (not argparse's usage block)
        sys.stderr.write(f'gpt_reference: {message}\n')
        sys.exit(2)


def parser():
    ap = Parser(description=__doc__.split('\n')[0], allow_abbrev=False)
    add = ap.add_argument
    add('--model', choices=['gpt'], default='gpt')
    add('--n-layer', type=int, default=2)
    add('--n-head', type=int, default=2)
    add('--n-embd', type=int, default=32)
    add('--block-size', type=int, default=16)
    add('--dropout', type=float, default=0.0)
    add('--bias', type=bool_flag, default=True)
    add('--gelu', choices=['none', 'tanh'], default='none')
    add('--dataset', choices=['text'], default='text')
    add('--data', default='/usr/share/common-licenses/GPL-3')
    add('--batch-size', type=int, default=4)
    add('--world-size', type=int, default=2)
    add('--seed', type=int, default=1337)
    # nanoGPT's DDP run seeds 1337 + rank (seed_offset); the goldens written before this default record
    # seed_per_rank: false in their config.
    add('--seed-per-rank', type=bool_flag, nargs='?', const=True, default=True)  # bare or true|false
    add('--steps', type=int, default=4)
    add('--no-sync', type=int, default=1)
    # train.py's loss = loss / gradient_accumulation_steps (divide), or loss.backward() on each micro-step (sum)
    add('--no-sync-loss', choices=['sum', 'divide'], default='divide')
    add('--eval-every', type=int, default=0)
    add('--eval-iters', type=int, default=2)
    add('--optimizer', choices=['adamw'], default='adamw')
    add('--lr', type=float, default=1e-3)
    add('--weight-decay', type=float, default=0.1)
    add('--betas', type=betas_flag, default=(0.9, 0.95))
    add('--clip-grad-norm', type=float, default=0.0)
    add('--aux-head-every', type=int, default=0)
    add('--find-unused-parameters', type=bool_flag, default=False)
    add('--static-graph', type=bool_flag, default=False)
    add('--gradient-as-bucket-view', type=bool_flag, default=False)
    add('--zero-grad', choices=['zeros', 'none'], default='none')
    add('--bucket-cap-mb', type=float, default=25.0)
    # torch.distributed.optim.ZeroRedundancyOptimizer with AdamW and nanoGPT's two groups (as configure_optimizer).
    add('--zero', type=bool_flag, default=False)
    # Uneven inputs: rank r runs --steps - K*r optimizer steps inside one `with Join([ddp])` (Join([ddp, zero])
    # with --zero true; divide_by_initial_world_size=True, Join's default).
    add('--uneven', type=int, default=0)
    add('--join', type=bool_flag, default=False)
    add_comm_hook_flags(add)
    add('--single', action='store_true', help='one process, no DDP: initial state, first batch, loss, grads')
    add('--dump-params', metavar='FILE')
    return ap


def parse(argv):
    ap = parser()
    a = ap.parse_args(argv)
    for name, lo in (('n_layer', 1), ('n_head', 1), ('n_embd', 1), ('block_size', 1), ('batch_size', 1),
                     ('world_size', 1), ('steps', 0), ('no_sync', 1), ('eval_every', 0), ('eval_iters', 1),
                     ('aux_head_every', 0), ('uneven', 0)):
        if getattr(a, name) < lo:
            ap.error(f'--{name.replace("_", "-")} must be >= {lo}, got {getattr(a, name)}')
    if a.world_size > MAX_WORLD_SIZE:
        ap.error(f'--world-size must be <= {MAX_WORLD_SIZE} (one process per rank), got {a.world_size}')
    if a.n_embd % a.n_head:
        ap.error(f'--n-embd ({a.n_embd}) must be a multiple of --n-head ({a.n_head})')
    if not 0.0 <= a.dropout < 1.0:
        ap.error(f'--dropout must be in [0, 1), got {a.dropout}')
    if a.bucket_cap_mb <= 0:
        ap.error(f'--bucket-cap-mb must be > 0, got {a.bucket_cap_mb}')
    if a.clip_grad_norm < 0:
        ap.error(f'--clip-grad-norm must be >= 0, got {a.clip_grad_norm}')
    if a.uneven > 0 and not a.join:
        ap.error('--uneven without --join true blocks in an all-reduce until the timeout: not an oracle')
    if a.join and a.no_sync != 1:
        ap.error('--join runs with --no-sync 1 only')
    if a.join and a.eval_every > 0:
        ap.error('--join with --eval-every is not modelled (an eval forward inside Join is a collective)')
    if a.uneven * (a.world_size - 1) > a.steps:
        ap.error(f'--uneven {a.uneven}: rank {a.world_size - 1} would run fewer than 0 of --steps {a.steps}')
    if a.zero and a.comm_hook != 'none':
        ap.error('--zero with a --comm-hook is not modelled')
    if not os.path.isfile(a.data):
        ap.error(f'--data {a.data}: no such file')
    n = os.path.getsize(a.data)
    n_train, n_val = int(n * 0.9), n - int(n * 0.9)
    if a.block_size >= n_train or (a.eval_every > 0 and a.block_size >= n_val):
        ap.error(f'--block-size {a.block_size} must be < the split it draws from ({n_train} train, {n_val} val '
                 f'tokens in {a.data})')
    return a


def config_doc(a):
    d = {k: v for k, v in vars(a).items() if k not in ('dump_params', 'single')}
    # The ZeRO/Join flags only when given (so that the goldens written before them stay byte-identical).
    for k, default in (('zero', False), ('uneven', 0), ('join', False), ('no_sync_loss', 'divide')):
        if d[k] == default:
            del d[k]
    d['betas'] = list(a.betas)
    return d


def f32(v):
    """The shortest decimal that reads back (strtof) as this float32 (numpy's float32 repr)."""
    return float(str(np.float32(v)))


def tensor_json(t):
    """Nested lists (rows of rows) of float32 values, or of ints for integer tensors."""
    t = t.detach()
    if t.dim() == 0:
        return int(t.item()) if not t.is_floating_point() else f32(t.item())
    if t.dim() == 1:
        return [int(v) for v in t.tolist()] if not t.is_floating_point() else [f32(v) for v in t.tolist()]
    return [tensor_json(row) for row in t]


def params_json(model):
    """named_parameters(): the tied weight once, as transformer.wte.weight (see TIED)."""
    return {n: tensor_json(p) for n, p in model.named_parameters()}


def write_json_atomic(path, doc):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix='.gpt_reference.')
    try:
        with os.fdopen(fd, 'w') as f:
            json.dump(doc, f, separators=(',', ':'))
            f.write('\n')
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def build(a, data):
    cfg = GPTConfig(len(data.vocab), a.block_size, a.n_layer, a.n_head, a.n_embd, a.dropout, a.bias, a.gelu,
                    a.aux_head_every)
    return GPT(cfg)


def count_buffer_broadcasts():
    """Wraps dist._broadcast_coalesced (what DDP's _sync_buffers calls) to count DDP's buffer broadcasts."""
    counter = {'n': 0}
    inner = dist._broadcast_coalesced

    def wrapped(*args, **kwargs):
        counter['n'] += 1
        return inner(*args, **kwargs)
    dist._broadcast_coalesced = wrapped
    return counter


def bucket_layout(ddp, model):
    """The Reducer's current buckets (after the rebuild at the second iteration's forward: the rebuilt ones),
    each a list of parameter names in bucket order, from reducer._get_zeros_like_grad_buckets() (zero copies;
    changes nothing); plus the sizes DDP's logging data has at this point."""
    names = {id(p): n for n, p in model.named_parameters()}
    buckets = [[names[id(p)] for p in b.parameters()] for b in ddp.reducer._get_zeros_like_grad_buckets()]
    log = ddp._get_ddp_logging_data()
    out = {'buckets': buckets, 'has_rebuilt_buckets': bool(getattr(ddp, '_has_rebuilt_buckets', False))}
    for key in ('bucket_cap_bytes', 'bucket_sizes', 'rebuilt_bucket_sizes', 'rebuilt_per_bucket_param_indices'):
        if key in log:
            out['logging_' + key] = log[key]
    return out


def estimate_loss(model, data, a):
    """nanoGPT's estimate_loss on every rank: eval mode, no_grad, eval_iters batches per split. The loss is the
    language model's alone: the aux head is never used in evaluation."""
    out = {}
    use_aux, model.module.use_aux = model.module.use_aux, False
    model.eval()
    with torch.no_grad():
        for split in ('train', 'val'):
            losses = torch.zeros(a.eval_iters)
            for k in range(a.eval_iters):
                x, y, _ = data.get_batch(split, a.batch_size, a.block_size)
                _, loss = model(x, y)
                losses[k] = loss.item()
            out[split] = f32(losses.mean().item())
            out[split + '_iters'] = [f32(v) for v in losses.tolist()]
    model.train()
    model.module.use_aux = use_aux
    return out


def make_optimizer(model, a):
    """nanoGPT's AdamW (configure_optimizer), or with --zero true ZeroRedundancyOptimizer over the same two
    groups (decay: dim >= 2, none: the rest; named_parameters order), same hyperparameters, its defaults
    otherwise (parameters_as_bucket_view=False, overlap_with_ddp=False)."""
    opt = configure_optimizer(model, a.weight_decay, a.lr, a.betas)
    if not a.zero:
        return opt
    from torch.distributed.optim import ZeroRedundancyOptimizer
    groups = [{'params': g['params'], 'weight_decay': g['weight_decay']} for g in opt.param_groups]
    return ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW, lr=a.lr, betas=a.betas, eps=1e-8,
                                   foreach=False)


def zero_record(model, opt):
    """The partition as 1.13's ZeroRedundancyOptimizer computed it (_partition_parameters(): per rank, per param
    group, the names in the order the local optimizer holds them) and this rank's optimizer-state floats (the local
    AdamW's state tensors with dim > 0: exp_avg, exp_avg_sq; the 0-dim step counters left out)."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {'partition': [[[names[id(p)] for p in g['params']] for g in groups]
                          for groups in opt._partition_parameters()],
            'state_numel': sum(t.numel() for st in opt.optim.state.values() for t in st.values()
                               if torch.is_tensor(t) and t.dim() > 0),
            'local_params': [[names[id(p)] for p in g['params']] for g in opt.optim.param_groups]}


def train(rank, a, data, model, ddp, rec, broadcasts):
    """nanoGPT train.py's loop. rec (this rank's record) is filled as it goes, so that what happened before
    an exception is kept."""
    names = [n for n, _ in model.named_parameters()]
    opt = make_optimizer(model, a)
    K = a.no_sync
    x, y, _ = data.get_batch('train', a.batch_size, a.block_size)
    where = {'step': None, 'micro': None, 'phase': 'start'}
    steps = a.steps - a.uneven * rank  # --uneven K: rank r stops K*r steps early (then Join shadows it)
    if a.join:
        rec['steps_run'] = steps
    join = contextlib.nullcontext()
    if a.join:
        from torch.distributed.algorithms.join import Join
        join = Join([ddp, opt] if a.zero else [ddp])  # divide_by_initial_world_size=True (the default)
    try:
        with join:
            for step in range(steps):
                where.update(step=step, micro=None, phase='eval')
                if a.eval_every > 0 and step % a.eval_every == 0:
                    rec['eval'].append(dict(step=step, **estimate_loss(ddp, data, a)))
                model.use_aux = aux_used(step, a.aux_head_every)
                losses, bcast = [], []
                rec['micro_losses'].append(losses)
                rec['buffer_broadcasts_per_forward'].append(bcast)
                for micro in range(K):
                    where.update(micro=micro, phase='forward')
                    # nanoGPT's accumulation: sync only on the last micro-step (what no_sync() sets).
                    ddp.require_backward_grad_sync = (micro == K - 1)
                    # Measured (tests/golden/gpt/check_facts.py a): with the aux head unused on step 1 and
                    # find_unused_parameters=False, 1.13 raises "Expected to have finished reduction in the prior
                    # iteration..." here, in step 2's DDP forward before the module's forward runs (no dropout
                    # mask drawn; the prefetched batch was already drawn). With static_graph=True, a no-sync
                    # micro-step after the first iteration fails in backward instead (1.13's internal assert
                    # "expect_autograd_hooks_ ... reducer.cpp:1490").
                    calls, rng, nb = model.forward_calls, torch.get_rng_state(), broadcasts['n']
                    try:
                        _, loss = ddp(x, y)
                    except RuntimeError:
                        where['module_forward_ran'] = model.forward_calls != calls
                        where['generator_advanced'] = not torch.equal(rng, torch.get_rng_state())
                        raise
                    bcast.append(broadcasts['n'] - nb)
                    losses.append(f32(loss.item()))
                    if a.no_sync_loss == 'divide':
                        loss = loss / K
                    where['phase'] = 'get_batch'
                    # Prefetch: after the forward, before the backward (nanoGPT's order of generator draws).
                    x, y, _ = data.get_batch('train', a.batch_size, a.block_size)
                    where['phase'] = 'backward'
                    loss.backward()
                where.update(micro=None, phase='after_backward')
                # Measured (check_facts.py b): with find_unused_parameters=True an unused parameter's .grad stays
                # as zero_grad left it (None, or zeros); AdamW skips a None grad, but a zero grad still moves the
                # weight (decay and the moments from earlier steps).
                rec['grad_none'].append([n for n, p in model.named_parameters() if p.grad is None])
                rec['grad_all_zero'].append([n for n, p in model.named_parameters()
                                             if p.grad is not None and not bool(p.grad.any())])
                if a.clip_grad_norm > 0:
                    where['phase'] = 'clip'
                    total = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip_grad_norm)
                    rec['clip_total_norm'].append(f32(total.item()))
                where['phase'] = 'optimizer_step'
                before = [p.detach().clone() for p in model.parameters()]
                opt.step()
                rec['unchanged_by_step'].append([n for n, b, p in zip(names, before, model.parameters())
                                                 if torch.equal(b, p)])
                opt.zero_grad(set_to_none=(a.zero_grad == 'none'))
                if step == 0:
                    rec['buckets_after_step0'] = bucket_layout(ddp, model)
        where.update(step=steps, micro=None, phase='eval')
        if a.eval_every > 0:
            rec['eval'].append(dict(step=a.steps, **estimate_loss(ddp, data, a)))
    except Exception as e:
        rec['error'] = dict(where, type=type(e).__name__, message=str(e))
        sys.stderr.write(f'[rank{rank}] torch raised at step {where["step"]} micro {where["micro"]} '
                         f'({where["phase"]}): {str(e).splitlines()[0]}\n')
        sys.stderr.flush()
    rec['buckets'] = bucket_layout(ddp, model)
    return opt


def worker(rank, a, port, result_dir):
    torch.set_num_threads(1)
    store = dist.TCPStore('127.0.0.1', port, None, False, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    dist.init_process_group('gloo', store=store, rank=rank, world_size=a.world_size,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        data = TextData(a.data)
        torch.manual_seed(a.seed + rank if a.seed_per_rank else a.seed)  # once, before the model
        model = build(a, data)
        broadcasts = count_buffer_broadcasts()
        # Measured (check_facts.py c-f): gradient_as_bucket_view moves bits at ws 3 only with --zero-grad zeros
        # (grads then alias their bucket and the Reducer div_s it); static_graph delays the bucket rebuild by one
        # iteration (on check_facts.py's configurations that moved no bit; ddp_sim models the delay); buffers are
        # broadcast before a forward only when the previous forward was a synced training one; the tiny
        # model's rebuilt buckets are one bucket (the first bucket's limit is 1 MiB whatever --bucket-cap-mb),
        # and with find_unused_parameters=True the buckets are never rebuilt.
        ddp = DDP(model, bucket_cap_mb=a.bucket_cap_mb, find_unused_parameters=a.find_unused_parameters,
                  static_graph=a.static_graph, gradient_as_bucket_view=a.gradient_as_bucket_view)
        register_comm_hook(ddp, a)
        rec = {'rank': rank, 'micro_losses': [], 'eval': [], 'clip_total_norm': [], 'grad_none': [],
               'grad_all_zero': [], 'unchanged_by_step': [], 'buffer_broadcasts_per_forward': [], 'error': None,
               'broadcasts_at_construction': broadcasts['n']}
        opt = train(rank, a, data, model, ddp, rec, broadcasts)
        rec['broadcasts_total'] = broadcasts['n']
        if a.zero:
            rec['zero'] = zero_record(model, opt)
        rec['params'] = params_json(model)
        write_json_atomic(os.path.join(result_dir, f'rank{rank}.json'), rec)
        dist.barrier()  # no rank tears down while a peer is in its last collective (torch 1.13 aborts it)
    finally:
        dist.destroy_process_group()


def run_ddp(a, argv):
    master = dist.TCPStore('127.0.0.1', 0, None, True, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S),
                           wait_for_workers=False)  # port 0: the OS picks a free one; held until the end
    work = tempfile.mkdtemp(prefix='gpt_reference.')
    try:
        t0 = time.monotonic()
        ctx = mp.spawn(worker, args=(a, master.port, work), nprocs=a.world_size, join=False)
        deadline = t0 + TIMEOUT_S
        try:
            while not ctx.join(timeout=0.2):
                if time.monotonic() > deadline:
                    print(f'gpt_reference: ranks still running after {TIMEOUT_S:g}s; killing them', file=sys.stderr)
                    for p in ctx.processes:
                        if p.is_alive():
                            p.terminate()
                    for p in ctx.processes:
                        p.join(5)
                        if p.is_alive():
                            p.kill()
                    return 1
        except Exception as e:  # ProcessRaisedException / ProcessExitedException; spawn killed the others
            print(f'gpt_reference: a rank failed: {e}', file=sys.stderr)
            return 1
        wall = time.monotonic() - t0
        ranks = []
        for r in range(a.world_size):
            with open(os.path.join(work, f'rank{r}.json')) as f:
                ranks.append(json.load(f))
        data = TextData(a.data)
        doc = {'oracle': 'sim/gpt_reference.py', 'torch_version': torch.__version__,
               'debug': os.environ['TORCH_DISTRIBUTED_DEBUG'], 'args': [v for v in argv if v != a.dump_params
                                                                         and v != '--dump-params'],
               'config': config_doc(a), 'vocab_size': len(data.vocab),
               'data_sizes': {'train': len(data.train), 'val': len(data.val)}, 'world_size': a.world_size,
               'tied': TIED, 'losses': [sum(r['micro_losses'], []) for r in ranks]}
        # DDP keeps the replicas equal; then the file holds them once ('params'), else every rank's.
        replicas = [r.pop('params') for r in ranks]
        doc['replicas_equal'] = all(p == replicas[0] for p in replicas)
        doc['params'] = replicas[0]
        if not doc['replicas_equal']:
            doc['replicas'] = replicas
        if a.join:
            doc['steps_run'] = [r['steps_run'] for r in ranks]
        if a.zero:
            parts = [r['zero']['partition'] for r in ranks]
            if any(p != parts[0] for p in parts):
                print('gpt_reference: the ranks computed different partitions', file=sys.stderr)
                return 1
            doc['zero'] = {'groups': ['decay', 'no_decay'], 'partition': parts[0],
                           'state_numel': [r['zero']['state_numel'] for r in ranks]}
        doc['ranks'] = ranks
        print(f'gpt_reference: {a.world_size} ranks, {a.steps} steps in {wall:.2f}s', file=sys.stderr)
        if a.dump_params:
            write_json_atomic(a.dump_params, doc)
        else:
            for r in ranks:
                print(f'rank {r["rank"]}: losses {r["micro_losses"]} error {r["error"] and r["error"]["message"]}')
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_single(a, argv):
    """No DDP, one process (rank 0's view): what the C++ model's first test compares."""
    torch.set_num_threads(1)
    data = TextData(a.data)
    torch.manual_seed(a.seed)
    model = build(a, data)
    state = {k: tensor_json(v) for k, v in model.state_dict().items() if k not in TIED}
    high = len(data.train) - a.block_size
    rng = torch.get_rng_state()
    next_randint = torch.randint(high, (a.batch_size,))  # the draw get_batch makes next
    torch.set_rng_state(rng)
    x, y, ix = data.get_batch('train', a.batch_size, a.block_size)
    model.use_aux = aux_used(0, a.aux_head_every)
    logits, loss = model(x, y)
    loss.backward()
    after = torch.randint(high, (a.batch_size,))  # shows what the forward's dropout masks consumed
    doc = {'oracle': 'sim/gpt_reference.py --single', 'torch_version': torch.__version__,
           'args': [v for v in argv if v != a.dump_params and v != '--dump-params'], 'config': config_doc(a),
           'vocab_size': len(data.vocab), 'vocab': data.vocab,
           'data_sizes': {'train': len(data.train), 'val': len(data.val)}, 'tied': TIED,
           'state_dict': state, 'state_dict_keys': list(model.state_dict().keys()),
           'parameter_names': [n for n, _ in model.named_parameters()],
           'next_randint': {'high': high, 'size': a.batch_size, 'values': tensor_json(next_randint)},
           'batch': {'ix': tensor_json(ix), 'x': tensor_json(x), 'y': tensor_json(y)},
           'aux_used': model.use_aux, 'logits': tensor_json(logits), 'loss': f32(loss.item()),
           'grads': {n: tensor_json(p.grad) for n, p in model.named_parameters() if p.grad is not None},
           'no_grad': [n for n, p in model.named_parameters() if p.grad is None],
           'next_randint_after_backward': tensor_json(after)}
    if a.dump_params:
        write_json_atomic(a.dump_params, doc)
    else:
        print(f'loss {doc["loss"]}; first batch ix {doc["batch"]["ix"]}')
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse(argv)
    return run_single(a, argv) if a.single else run_ddp(a, argv)


if __name__ == '__main__':
    sys.exit(main())
