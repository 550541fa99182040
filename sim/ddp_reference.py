#!/usr/bin/python3
"""The PyTorch oracle for //sim:ddp_sim: REAL torch DistributedDataParallel on CPU over gloo.

One process per rank (torch.multiprocessing.spawn), rendezvous through a fresh file (init_method=file://),
one thread per process. Same flags as `ddp_sim`; with --dump-params FILE the parent writes one JSON:

    {"world_size": N, "args": [flags as given, without --dump-params],
     "replicas": [{state_dict name: [[out][in]] or [out]}, ... one per rank],
     "sampler_indices": [[[rank0 epoch0 indices], [rank1 epoch0 indices], ...], ... one list per epoch],
     "losses": [[rank0 loss per batch...], ...]}

With --zero true also "zero": {"partition": [[names of rank 0's parameters in partition order], ...],
"state_numel": [floats of each rank's optimizer state: its local optimizer's state tensors with dim > 0]}.

Floats are float32 values printed with 9 significant digits (they read back to the exact float32).

    /usr/bin/python3 sim/ddp_reference.py --world-size 3 --epochs 2 --dump-params out.json

Must be run with Debian's python3-torch (1.13); `python3` on PATH may not have torch.
"""
import argparse
import contextlib
import copy
import datetime
import json
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # one BLAS thread: threaded OpenBLAS adds in another order
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from comm_hooks import add_comm_hook_flags, register_comm_hook  # noqa: E402
import cpu_sync_batchnorm  # noqa: E402
import hand_sync_reference  # noqa: E402

# Wall-clock limit for the whole run (all ranks); a rank that fails or hangs makes the script exit 1.
TIMEOUT_S = float(os.environ.get('DDP_REFERENCE_TIMEOUT', '600'))
EXIT_GRACE_S = 20.0  # after every rank wrote its result, how long its processes may take to exit

DIGITS = '/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz'
CNN = ('conv2d(1,8,3,padding=1),batchnorm2d(8),relu,maxpool2d(2),'
       'conv2d(8,16,3,padding=1),batchnorm2d(16),relu,maxpool2d(2),'
       'flatten,dropout(0.25),linear(64,32),relu,linear(32,10)')


class UnusedLinear(nn.Linear):
    """--model's unused_linear(in, out): registered (its parameters, their init draws), never called."""
    def forward(self, x):
        return x


LAYERS = {'linear': nn.Linear, 'unused_linear': UnusedLinear, 'relu': nn.ReLU, 'flatten': nn.Flatten,
          'conv2d': nn.Conv2d, 'maxpool2d': nn.MaxPool2d, 'batchnorm1d': nn.BatchNorm1d, 'batchnorm2d': nn.BatchNorm2d,
          'dropout': nn.Dropout, 'tanh': nn.Tanh, 'sigmoid': nn.Sigmoid, 'gelu': nn.GELU, 'layernorm': nn.LayerNorm}
TOY_X = [[-1.2, 3.1], [-0.9, 2.9], [-0.5, 2.6], [2.3, -1.1], [2.7, -1.5]]
TOY_LABELS = [0, 0, 0, 1, 1]


def bool_flag(s):
    if s not in ('true', 'false'):
        raise argparse.ArgumentTypeError(f"expected true or false, got {s!r}")
    return s == 'true'


def layers_flag(s):
    try:
        sizes = [int(v) for v in s.split(',')]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}")
    if len(sizes) < 2 or any(v < 1 for v in sizes):
        raise argparse.ArgumentTypeError(f"need >= 2 positive sizes, got {s!r}")
    return sizes


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0], allow_abbrev=False)
    ap.add_argument('--world-size', type=int, default=2)
    ap.add_argument('--layers', type=layers_flag, default=[6, 4, 2])
    ap.add_argument('--activation', choices=['none', 'relu'], default='none')
    # ce-probs: F.cross_entropy with float targets (the random dataset's y as class probabilities)
    ap.add_argument('--loss', choices=['mse', 'ce', 'ce-probs'], default='mse')
    ap.add_argument('--optimizer', choices=['sgd', 'adam'], default='sgd')
    ap.add_argument('--lr', type=float, default=0.01)
    ap.add_argument('--momentum', type=float, default=0.0)  # SGD only; ignored by Adam
    ap.add_argument('--dataset', choices=['random', 'toy', 'digits'], default='random')
    ap.add_argument('--data', default=DIGITS)
    ap.add_argument('--model', default='mlp')  # mlp | cnn | a spec of nn layers (see build_model)
    ap.add_argument('--broadcast-buffers', type=bool_flag, default=True)
    ap.add_argument('--find-unused-parameters', type=bool_flag, default=False)
    ap.add_argument('--static-graph', type=bool_flag, default=False)
    ap.add_argument('--gradient-as-bucket-view', type=bool_flag, default=False)
    ap.add_argument('--zero-grad', choices=['none', 'zeros'], default='none')  # zero_grad(set_to_none=True|False)
    ap.add_argument('--seed-per-rank', type=bool_flag, default=False)
    ap.add_argument('--sync-batchnorm', type=bool_flag, default=False)  # cpu_sync_batchnorm.py's SyncBatchNorm
    ap.add_argument('--samples', type=int, default=64)
    ap.add_argument('--seed', type=int, default=12345)
    ap.add_argument('--shuffle', type=bool_flag, default=True)
    ap.add_argument('--sampler-seed', type=int, default=0)
    ap.add_argument('--drop-last', type=bool_flag, default=False)
    ap.add_argument('--loader-drop-last', type=bool_flag, default=False)
    ap.add_argument('--set-epoch', type=bool_flag, default=True)
    ap.add_argument('--batch-size', type=int, default=8)
    ap.add_argument('--epochs', type=int, default=1)
    ap.add_argument('--bucket-cap-mb', type=float, default=25.0)
    ap.add_argument('--no-sync', type=int, default=1)
    # How the micro-batch losses reach .grad: loss.backward() on each (sum), or (loss / K).backward() (divide)
    ap.add_argument('--no-sync-loss', choices=['sum', 'divide'], default='sum')
    ap.add_argument('--sync-on', choices=['last', 'first', 'never'], default='last')
    # a NaN in rank R's first micro-batch of optimizer step S (its first input value): ddp_sim's --inject-nan
    ap.add_argument('--inject-nan', default='none')
    # loss = loss_fn(out, y) / D before the backward (D = world size: dividing where DDP already averages)
    ap.add_argument('--loss-divisor', type=int, default=1)
    ap.add_argument('--init', choices=['same', 'per-rank'], default='same')
    # torch.distributed.optim.ZeroRedundancyOptimizer over ddp.parameters() (its defaults), the same optimizer class
    # and arguments; the dump then has "zero": each rank's partition (names) and optimizer state (floats).
    ap.add_argument('--zero', type=bool_flag, default=False)
    add_comm_hook_flags(ap.add_argument)
    hand_sync_reference.add_flags(ap.add_argument)  # --hand-sync, --average: no DDP, the script's own average
    # Uneven inputs: rank r trains on the first B - K*r batches of each epoch; --join wraps each epoch's loop
    # in torch.distributed.algorithms.Join([ddp], divide_by_initial_world_size=(--join-divide initial)), or
    # Join([ddp, zero]) with --zero true. --join-scope run: one Join around all epochs instead of one per epoch
    # (PyTorch's Join tutorial's way: a rank that runs out of batches in epoch e goes on into epoch e+1).
    ap.add_argument('--uneven', type=int, default=0)
    ap.add_argument('--join', type=bool_flag, default=False)
    ap.add_argument('--join-divide', choices=['initial', 'active'], default='initial')
    ap.add_argument('--join-scope', choices=['epoch', 'run'], default='epoch')
    ap.add_argument('--dump-params')
    return ap


def parse(argv):
    ap = parser()
    a = ap.parse_args(argv)
    a.steps_done = 0  # optimizer steps taken so far (--inject-nan's step)
    if a.world_size < 1:
        ap.error('--world-size must be >= 1')
    if a.batch_size < 1:
        ap.error('--batch-size must be >= 1')
    if a.epochs < 0:
        ap.error('--epochs must be >= 0')
    if a.no_sync < 1:
        ap.error('--no-sync must be >= 1')
    if a.bucket_cap_mb <= 0:
        ap.error('--bucket-cap-mb must be > 0')
    if a.dataset == 'random' and a.samples < 1:
        ap.error('--samples must be >= 1')
    if a.dataset == 'digits' and a.loss != 'ce':
        ap.error('--dataset digits trains with --loss ce')
    if a.dataset == 'toy' and (a.layers[0] != 2 or a.layers[-1] != 2):
        ap.error('--dataset toy needs --layers 2,...,2')
    if a.uneven < 0:
        ap.error('--uneven must be >= 0')
    if a.uneven > 0 and not a.join:
        ap.error('--uneven without --join true blocks in an all-reduce until the timeout: not an oracle')
    if (a.uneven > 0 or a.join) and a.no_sync != 1:
        ap.error('--uneven and --join run with --no-sync 1 only')
    if a.join_scope != 'epoch' and not a.join:
        ap.error('--join-scope run needs --join true')
    return a


def cli_args(argv):
    """The flags as given, without --dump-params and its value."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == '--dump-params':
            i += 2
            continue
        if argv[i].startswith('--dump-params='):
            i += 1
            continue
        out.append(argv[i])
        i += 1
    return out


class XYDataset(Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, idx):
        return self.items[idx]


def load_digits(a):
    """scikit-learn's digits.csv.gz: x = pixels / 16 as float32 ([1, 8, 8], or [64] for the MLP), labels;
    then manual_seed(seed); perm = randperm(1797): train perm[:1500], test perm[1500:]."""
    import gzip
    with gzip.open(a.data, 'rt') as f:
        rows = [[int(float(v)) for v in line.split(',')] for line in f if line.strip()]
    x = torch.tensor([r[:64] for r in rows], dtype=torch.float64) / 16
    x = x.float().view(len(rows), *((64,) if a.model == 'mlp' else (1, 8, 8)))
    y = torch.tensor([r[64] for r in rows], dtype=torch.int64)
    torch.manual_seed(a.seed)
    perm = torch.randperm(len(rows))
    train, test = perm[:1500], perm[1500:]
    return XYDataset([(x[i], y[i]) for i in train]), (x[test], y[test])


def make_dataset(a):
    n_in, n_out = a.layers[0], a.layers[-1]
    items = []
    if a.dataset == 'digits':
        return load_digits(a)[0]
    if a.dataset == 'random':
        # Notebook 000's RandomTensorDataset: x then y, sample by sample, after one manual_seed.
        torch.manual_seed(a.seed)
        for _ in range(a.samples):
            x = torch.randn(n_in)
            y = torch.randn(n_out)
            t = y if a.loss in ('mse', 'ce-probs') else torch.tensor(int(torch.argmax(y)), dtype=torch.int64)
            items.append((x, t))
    else:
        # Notebook 001's toy problem: two clusters in 2-D.
        for row, label in zip(TOY_X, TOY_LABELS):
            x = torch.tensor(row, dtype=torch.float32)
            lab = torch.tensor(label, dtype=torch.int64)
            t = F.one_hot(lab, n_out).float() if a.loss == 'mse' else lab
            items.append((x, t))
    return XYDataset(items)


class Net(nn.Module):
    def __init__(self, sizes, relu):
        super().__init__()
        mods = []
        for i in range(len(sizes) - 1):
            mods.append(nn.Linear(sizes[i], sizes[i + 1]))
            if relu and i < len(sizes) - 2:
                mods.append(nn.ReLU())
        self.layers = nn.Sequential(*mods)

    def forward(self, x):
        return self.layers(x)


def build_model(a):
    """--model: mlp (Net), cnn, or 'conv2d(1,8,3,padding=1),relu,...' as nn.Sequential (names 0.weight, ...)."""
    if a.model == 'mlp':
        return Net(a.layers, a.activation == 'relu')
    spec = CNN if a.model == 'cnn' else a.model
    layers, depth, cur = [], 0, ''
    for ch in spec.replace(' ', '') + ',':
        depth += (ch == '(') - (ch == ')')
        if ch == ',' and depth == 0:
            name, _, args = cur.partition('(')
            args = args[:-1]
            pos = [v for v in args.split(',') if v and '=' not in v]
            kw = dict(v.split('=') for v in args.split(',') if '=' in v)
            def conv(v):
                if v in ('True', 'False', 'true', 'false'):
                    return v.lower() == 'true'
                if v.strip('\'"').isalpha():  # GELU's approximate='tanh'
                    return v.strip('\'"')
                return float(v) if '.' in v or 'e' in v else int(v)
            layers.append(LAYERS[name](*[conv(v) for v in pos], **{k: conv(v) for k, v in kw.items()}))
            cur = ''
        else:
            cur += ch
    return nn.Sequential(*layers)


def f32(v):
    return float('%.9g' % v)


def tensor_json(t):
    t = t.detach()
    if t.dim() == 0:
        return f32(t.item())
    if t.dim() == 1:
        return [f32(v) for v in t.tolist()]
    return [tensor_json(row) for row in t]


def write_json_atomic(path, doc):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix='.ddp_reference.')
    try:
        with os.fdopen(fd, 'w') as f:
            json.dump(doc, f, separators=(',', ':'))
            f.write('\n')
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def run_epoch(a, rank, epoch, batches, ddp, opt, loss_fn, losses):
    for b, (x, t) in enumerate(batches):
        step = (b + 1) % a.no_sync == 0 or b == len(batches) - 1
        if a.inject_nan != 'none' and b % a.no_sync == 0:
            nan_rank, nan_step = (int(v) for v in a.inject_nan.split(':'))
            if rank == nan_rank and a.steps_done == nan_step:
                x = x.clone()
                x.view(-1)[0] = float('nan')
        # --sync-on: which micro-batch of a step runs outside no_sync() (first / never: the misuses)
        sync = {'last': step, 'first': b % a.no_sync == 0, 'never': False}[a.sync_on]
        scale = a.no_sync if a.no_sync_loss == 'divide' else None
        def backward(loss):
            scaled = loss / a.loss_divisor if a.loss_divisor > 1 else loss
            (scaled / scale if scale else scaled).backward()
        if sync:
            loss = loss_fn(ddp(x), t)
            backward(loss)
        else:
            with ddp.no_sync():
                loss = loss_fn(ddp(x), t)
                backward(loss)
        if step:
            opt.step()
            opt.zero_grad(set_to_none=a.zero_grad == 'none')
            a.steps_done += 1
        losses.append(f32(loss.item()))
        # One write per line so that the ranks' lines do not interleave mid-line.
        sys.stdout.write(f'[rank{rank}] Epoch: {epoch + 1:03d}/{a.epochs:03d} | Batch size {len(x):03d} | '
                         f'Loss: {loss.item():.2f}\n')
        sys.stdout.flush()


def worker(rank, a, init_file, result_dir):
    torch.set_num_threads(1)
    ws = a.world_size
    dist.init_process_group('gloo', init_method='file://' + init_file, rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=60))
    try:
        ds = make_dataset(a)
        torch.manual_seed(a.seed + rank if a.init == 'per-rank' else a.seed)
        model = build_model(a)
        if a.sync_batchnorm:  # convert_sync_batchnorm, on CPU (cpu_sync_batchnorm.py says how)
            cpu_sync_batchnorm.install_cpu_ops()
            cpu_sync_batchnorm.convert(model)
        hand = a.hand_sync != 'none'
        model0 = copy.deepcopy(model) if hand else None  # (all ranks seeded alike: rank 0's weights)
        if hand:
            ddp = hand_sync_reference.HandSynced(model, a)
        else:
            ddp = DDP(model, bucket_cap_mb=a.bucket_cap_mb, broadcast_buffers=a.broadcast_buffers,
                      find_unused_parameters=a.find_unused_parameters, static_graph=a.static_graph,
                      gradient_as_bucket_view=a.gradient_as_bucket_view)
            register_comm_hook(ddp, a)
        if a.seed_per_rank:  # the training script's own seed per rank, after DDP(model)
            torch.manual_seed(a.seed + rank)
        opt_class, kw = ((torch.optim.SGD, dict(lr=a.lr, momentum=a.momentum)) if a.optimizer == 'sgd'
                         else (torch.optim.Adam, dict(lr=a.lr)))
        if a.zero:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=opt_class, **kw)
        else:
            opt = opt_class(ddp.parameters(), **kw)
        if hand:
            opt = hand_sync_reference.SyncThenStep(ddp, opt)
        loss_fn = F.mse_loss if a.loss == 'mse' else F.cross_entropy

        sampler = DistributedSampler(ds, num_replicas=ws, rank=rank, shuffle=a.shuffle, seed=a.sampler_seed,
                                     drop_last=a.drop_last)
        loader = DataLoader(ds, batch_size=a.batch_size, sampler=sampler, drop_last=a.loader_drop_last)

        indices, losses = [], []
        first = None  # this rank's first batch (--hand-sync's step0)
        joinables = [ddp, opt] if a.zero else [ddp]

        def make_join():
            return (Join(joinables, divide_by_initial_world_size=a.join_divide == 'initial') if a.join
                    else contextlib.nullcontext())
        # --join-scope run: `with Join(...): for epoch ...: for batch ...` (one context for the whole run).
        with (make_join() if a.join_scope == 'run' else contextlib.nullcontext()):
            for epoch in range(a.epochs):
                if a.set_epoch:
                    sampler.set_epoch(epoch)
                indices.append([int(i) for i in sampler])
                batches = list(loader)
                first = first if epoch else batches[0]
                batches = batches[:len(batches) - a.uneven * rank]  # a loop that breaks early
                with (make_join() if a.join_scope == 'epoch' else contextlib.nullcontext()):
                    run_epoch(a, rank, epoch, batches, ddp, opt, loss_fn, losses)

        doc = {'indices': indices, 'losses': losses}
        # the buckets DDP holds now, in bytes (its logging data: '22568, 1050624' ...), for the layout's tests
        if hand:
            doc['step0'] = hand_sync_reference.step0(a, model0, first, loss_fn)
        else:
            doc['bucket_sizes'] = [int(b) for b in ddp._get_ddp_logging_data().get('bucket_sizes', '').split(',') if b]
        if a.dataset == 'digits':  # DDP(model).eval() under no_grad, as a training script evaluates
            x_test, y_test = load_digits(a)[1]
            ddp.eval()
            with torch.no_grad():
                doc['test_correct'] = int((ddp(x_test).argmax(1) == y_test).sum())
        doc['params'] = {k: tensor_json(v) for k, v in model.named_parameters()}
        if list(model.buffers()):
            doc['buffers'] = {k: (int(v) if v.dtype == torch.int64 else tensor_json(v))
                              for k, v in model.named_buffers()}
        if a.zero:  # the partition as ZeroRedundancyOptimizer computed it, and this rank's local optimizer state
            names = {id(p): k for k, p in model.named_parameters()}
            doc['zero_partition'] = [[names[id(p)] for g in groups for p in g['params']]
                                     for groups in opt._partition_parameters()]
            doc['state_numel'] = sum(t.numel() for st in opt.optim.state.values() for t in st.values()
                                     if torch.is_tensor(t) and t.dim() > 0)
        write_json_atomic(os.path.join(result_dir, f'rank{rank}.json'), doc)
        dist.barrier()  # no rank tears down while a peer is in its last collective (torch 1.13 aborts it)
    finally:
        dist.destroy_process_group()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse(argv)
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix='ddp_reference.')
    try:
        init_file = os.path.join(work, 'rendezvous')  # fresh, does not exist yet
        ctx = mp.spawn(worker, args=(a, init_file, work), nprocs=a.world_size, join=False)
        deadline = time.monotonic() + TIMEOUT_S
        done_at = None  # when every rank's result file was there
        try:
            while not ctx.join(timeout=1.0):
                if done_at is None and all(os.path.exists(os.path.join(work, f'rank{r}.json'))
                                           for r in range(a.world_size)):
                    done_at = time.monotonic()
                if done_at is not None and time.monotonic() > done_at + EXIT_GRACE_S:
                    # Every rank wrote its whole result (atomically, before its last barrier) but a process has not
                    # exited: its teardown hangs, which changes no number. End it and go on.
                    print(f'ddp_reference: every rank wrote its result, but a process was still alive '
                          f'{EXIT_GRACE_S:g}s later; ended it', file=sys.stderr)
                    for p in ctx.processes:
                        if p.is_alive():
                            p.kill()
                    break
                if time.monotonic() > deadline:
                    print(f'ddp_reference: ranks still running after {TIMEOUT_S:g}s; killing them',
                          file=sys.stderr)
                    for p in ctx.processes:
                        if p.is_alive():
                            p.terminate()
                    for p in ctx.processes:
                        p.join(5)
                        if p.is_alive():
                            p.kill()
                    return 1
        except Exception as e:  # ProcessRaisedException / ProcessExitedException; spawn killed the others
            print(f'ddp_reference: a rank failed: {e}', file=sys.stderr)
            return 1

        ranks = []
        for r in range(a.world_size):
            with open(os.path.join(work, f'rank{r}.json')) as f:
                ranks.append(json.load(f))
        doc = {'world_size': a.world_size,
               'args': cli_args(argv),
               'replicas': [d['params'] for d in ranks],
               'sampler_indices': [[d['indices'][e] for d in ranks] for e in range(a.epochs)],
               'losses': [d['losses'] for d in ranks]}
        if 'bucket_sizes' in ranks[0]:
            doc['bucket_sizes'] = ranks[0]['bucket_sizes']
        if 'step0' in ranks[0]:  # --hand-sync: rank 0's step-0 values that are torch DDP's bits
            doc['step0'] = ranks[0]['step0']
        if 'buffers' in ranks[0]:
            doc['buffers'] = [d['buffers'] for d in ranks]
        if a.zero:
            if any(d['zero_partition'] != ranks[0]['zero_partition'] for d in ranks):
                print('ddp_reference: the ranks computed different partitions', file=sys.stderr)
                return 1
            doc['zero'] = {'partition': ranks[0]['zero_partition'], 'state_numel': [d['state_numel'] for d in ranks]}
        if 'test_correct' in ranks[0]:
            doc['test_correct'] = [d['test_correct'] for d in ranks]
        if a.dump_params:
            write_json_atomic(a.dump_params, doc)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
