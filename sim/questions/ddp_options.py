#!/usr/bin/python3
"""What DDP's constructor options change, measured in the torch that runs this script (1.13 or 2.x): bucket_cap_mb, static_graph,
gradient_as_bucket_view and find_unused_parameters against the defaults, and the same run twice.

Real torch DDP (CPU, gloo, 3 ranks forked by torch.multiprocessing.start_processes, 10 s timeout per collective),
every run one after the other on one process group (the world_size 2 runs on a group of its ranks 0 and 1), each
with a fresh model, optimizer and generators. Model: nn.Sequential(Linear(64,512), Linear(512,512), Linear(512,512),
Linear(512,10)), 563722 floats; 4 SGD steps (lr 0.01), each rank on its own batch of 8 (MSELoss). Per run and
iteration: the all-reduces DDP issues and their sizes (DDP is handed a Python ProcessGroup that notes each one,
then forwards it to gloo), the bytes each rank wrote to its sockets (wchar of /proc/self/io around the step:
every byte gloo sends), whether each .grad is a view into the bucket the all-reduce sent, and every rank's
parameters at the end, compared bitwise with the default run's.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 sim/questions/ddp_options.py
"""
import datetime
import time
import os
import shutil
import tempfile
import warnings

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import forked
from forwarding_pg import ForwardingPG

STEPS = 4
KEEP = {'set_to_none': False}  # zero_grad(set_to_none=False): torch 1.13's default zero_grad(), .grad kept as zeros
RUNS = [  # name, world_size, DDP keyword arguments (and the zero_grad's, after '_zero')
    ('default', 3, {}), ('again', 3, {}), ('cap1', 3, {'bucket_cap_mb': 1}), ('cap25', 3, {'bucket_cap_mb': 25}),
    ('static_graph', 3, {'static_graph': True}), ('bucket_view', 3, {'gradient_as_bucket_view': True}),
    ('default_keep', 3, {'_zero': KEEP}), ('bucket_view_keep', 3, {'gradient_as_bucket_view': True, '_zero': KEEP}),
    ('default_keep_ws2', 2, {'_zero': KEEP}),
    ('bucket_view_keep_ws2', 2, {'gradient_as_bucket_view': True, '_zero': KEEP}),
    ('again_keep', 3, {'_zero': KEEP}), ('again_ws2', 2, {}),
    ('find_unused', 3, {'find_unused_parameters': True}), ('default_ws2', 2, {}), ('cap1_ws2', 2, {'bucket_cap_mb': 1}),
    ('static_graph_ws2', 2, {'static_graph': True}), ('find_unused_ws2', 2, {'find_unused_parameters': True})]


class NotingPG(ForwardingPG):
    """Notes each all-reduce's tensor (size, storage range) before the real (gloo) group runs it."""
    def __init__(self, pg):
        super().__init__(pg)
        self.sent, self.when = [], []

    def seen(self, op, tensors):
        if op != 'ar':
            return
        t = tensors[0]
        size = str(t.numel()) if t.is_floating_point() else f'{t.numel()} used-flags'  # find_unused's bitmap
        self.sent.append((size, t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()))
        self.when.append(time.perf_counter())


def wchar():
    with open('/proc/self/io') as f:
        return next(int(line.split()[1]) for line in f if line.startswith('wchar'))


def train(rank, pg, kwargs):
    kwargs = dict(kwargs)
    zero = kwargs.pop('_zero', {'set_to_none': True})
    pg = NotingPG(pg)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), nn.Linear(512, 512), nn.Linear(512, 512), nn.Linear(512, 10))
    ddp = DDP(model, process_group=pg, **kwargs)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)
    last_grad = [0.0]  # when the backward computed its last parameter gradient (a tensor hook on each)
    for p in model.parameters():
        p.register_hook(lambda grad: last_grad.__setitem__(0, time.perf_counter()))
    iters = []
    for _ in range(STEPS):
        x, y = torch.randn(8, 64, generator=g), torch.randn(8, 10, generator=g)
        pg.sent, pg.when = [], []
        dist.barrier(group=pg.pg)  # not noted, and outside the bytes counted
        before = wchar()
        opt.zero_grad(**zero)
        loss = nn.functional.mse_loss(ddp(x), y)
        start = time.perf_counter()
        loss.backward()
        seconds = time.perf_counter() - start
        sent = wchar() - before
        early = sum(int(n) for (n, _, _), t in zip(pg.sent, pg.when) if n.isdigit() and t < last_grad[0])
        views = sum(any(lo <= p.grad.data_ptr() < hi for _, lo, hi in pg.sent) for p in model.parameters())
        iters.append({'sizes': [n for n, _, _ in pg.sent], 'bytes': sent, 'views': views, 'early': early,
                      'seconds': seconds})
        opt.step()
    return {'iters': iters, 'params': [p.detach().clone() for p in model.parameters()]}


def worker(rank, work):
    """Every run, one after the other, on one gloo group of 3 (and its ranks 0 and 1 for the world_size 2 runs)."""
    warnings.filterwarnings('ignore')
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{work}/init', rank=rank, world_size=3,
                            timeout=datetime.timedelta(seconds=10))
    pair = dist.new_group([0, 1])
    out = {}
    for name, ws, kwargs in RUNS:
        if rank < ws:
            out[name] = train(rank, dist.group.WORLD if ws == 3 else pair, kwargs)
        dist.barrier()
    torch.save(out, f'{work}/out{rank}.pt')
    forked.leave(work, rank, 3)


def run_all():
    work = tempfile.mkdtemp(prefix='ddp_options.')
    try:
        mp.start_processes(worker, args=(work,), nprocs=3, start_method='fork')
        outs = [torch.load(f'{work}/out{r}.pt') for r in range(3)]
        return {name: [outs[r][name] for r in range(ws)] for name, ws, _ in RUNS}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def differing(a, b):
    """Floats of every rank's parameters that are not bitwise equal between runs a and b, and the total."""
    diff = total = 0
    for ra, rb in zip(a, b):
        for pa, pb in zip(ra['params'], rb['params']):
            diff += int((pa.view(torch.int32) != pb.view(torch.int32)).sum())
            total += pa.numel()
    return diff, total


def mb(n):
    return f'{n / 1e6:.2f} MB'


def main():
    res = run_all()
    floats = sum(p.numel() for p in res['default'][0]['params'])
    for name, ws, kw in RUNS:
        for i, it in enumerate(res[name][0]['iters']):
            sent = ' '.join(str(r['iters'][i]['bytes']) for r in res[name])
            print(f"fact: {name} (world_size {ws}) iteration {i}: all-reduces of {' + '.join(it['sizes'])} elements; bytes each rank "
                  f"sent: {sent}; .grad views into a bucket: {it['views']} of {len(res[name][0]['params'])}", flush=True)

    def layout(name, i):
        sizes = res[name][0]['iters'][i]['sizes']
        grads = [s for s in sizes if s.isdigit()]
        flags = [s for s in sizes if not s.isdigit()]
        return (f"{len(grads)} gradient all-reduce{'s' if len(grads) > 1 else ''} ({'+'.join(grads)} floats)"
                + ''.join(f' and one of {f} (one per parameter: was it used)' for f in flags))

    def sent(name):  # the largest bytes any rank sent in any iteration
        return max(it['bytes'] for r in res[name] for it in r['iters'])

    d, total = differing(res['default'], res['again'])
    dk, totalk = differing(res['default_keep'], res['again_keep'])
    d2, total2 = differing(res['default_ws2'], res['again_ws2'])
    print(f"answer: reproducible: the same training run twice with the same seeds ends in bitwise equal parameters "
          f"({total - d} of {total} floats over 3 ranks equal; with zero_grad(set_to_none=False) {totalk - dk} of "
          f"{totalk}; at world size 2 {total2 - d2} of {total2}): on CPU with Gloo every addition runs in the same "
          f"order each time", flush=True)
    ring = 2 * (3 - 1) / 3 * 4 * floats
    print(f"answer: bytes: at world_size 3 each rank sends at most {mb(sent('default'))} per step for the "
          f"{floats} gradient floats: the ring all-reduce's 2 x (3-1)/3 x 4 bytes per float ({mb(ring)}) and a few "
          f"bytes of headers; with bucket_cap_mb=1 at most {mb(sent('cap1'))}", flush=True)
    d, total = differing(res['default'], res['cap1'])
    d2, total2 = differing(res['default_ws2'], res['cap1_ws2'])
    print(f"answer: bucket_cap_mb=1 against 25: from iteration 1 {layout('cap1', 1)} instead of "
          f"{layout('default', 1)} (iteration 0: {layout('cap1', 0)} either way), the same bytes; at world_size 3 "
          f"{d} of {total} floats end in other bits, at world_size 2 {d2} of {total2}", flush=True)
    trade = '; '.join(f"{cap}: {len(res[name][0]['iters'][-1]['sizes'])} all-reduce(s), "
                      f"{res[name][0]['iters'][-1]['early']} of {floats} floats issued while the backward still "
                      f"computed gradients" for name, cap in (('cap1', '1'), ('default', '25')))
    print(f"answer: what bucket_cap_mb trades (iteration {STEPS - 1}, world_size 3, rank 0): {trade}: a smaller cap "
          f"issues more of the gradients' all-reduces while the backward still runs, where they can overlap it, "
          f"in more and smaller all-reduces; the bytes sent are the same (above). Whether that is faster depends "
          f"on the link: time it on yours", flush=True)
    times = ', '.join(f"cap {cap} {1e3 * sorted(it['seconds'] for it in res[name][0]['iters'][1:])[1]:.1f} ms"
                      for name, cap in (('cap1', '1'), ('default', '25')))
    print(f"fact: backward with its all-reduces on this machine, median of iterations 1-{STEPS - 1}, rank 0: {times} "
          f"(CPU and loopback: no network to hide)", flush=True)
    first = '1 MiB whatever the cap' if layout('cap25', 1) == layout('default', 1) else 'the cap when one is given'
    print(f"answer: bucket_cap_mb=25 given (the default's value): from iteration 1 {layout('cap25', 1)} (not given: "
          f"{layout('default', 1)}): torch {torch.__version__.split('+')[0]} closes the first rebuilt bucket at "
          f"{first}", flush=True)
    d2, total2 = differing(res['default_ws2'], res['static_graph_ws2'])
    d, total = differing(res['default'], res['static_graph'])
    print(f"answer: static_graph=True: iteration 1 runs {layout('static_graph', 1)} (default: {layout('default', 1)}), "
          f"the rebuilt layout from iteration 2 ({layout('static_graph', 2)}; iteration 0: {layout('static_graph', 0)}); at world_size 3 {d} of {total} floats "
          f"end in other bits than the default run's, at world_size 2 {d2} of {total2}", flush=True)
    d, total = differing(res['default'], res['bucket_view'])
    dk, totalk = differing(res['default_keep'], res['bucket_view_keep'])
    d2, total2 = differing(res['default_keep_ws2'], res['bucket_view_keep_ws2'])
    views = res['bucket_view'][0]['iters'][-1]['views']
    print(f"answer: gradient_as_bucket_view=True: {views} of {len(res['default'][0]['params'])} .grad tensors are "
          f"views into the buckets all-reduced (default: {res['default'][0]['iters'][-1]['views']}), so each rank "
          f"keeps one copy of the {floats} gradient floats instead of two ({mb(4 * floats)} less); the same "
          f"all-reduces, and {total - d} of {total} floats bitwise equal to the default run's with "
          f"zero_grad(set_to_none=True)", flush=True)
    print(f"answer: gradient_as_bucket_view=True with zero_grad(set_to_none=False) (torch 1.13's default "
          f"zero_grad()): at world_size 3 {dk} of {totalk} floats end in other bits than the default run's with the "
          f"same zero_grad, at world_size 2 {d2} of {total2}: the .grad kept from the last step is its bucket "
          f"slot, so DDP averages it in place, a division by world_size, instead of multiplying a copy by "
          f"float(1/world_size), and x / 3 is not always x * float(1/3) (x / 2 always is x * 0.5)", flush=True)
    d2, total2 = differing(res['default_ws2'], res['find_unused_ws2'])
    d, total = differing(res['default'], res['find_unused'])
    print(f"answer: find_unused_parameters=True on a model that uses every parameter: iteration 1 runs "
          f"{layout('find_unused', 1)} (default: {layout('default', 1)}): buckets cut by size from iteration 0 and never "
          f"rebuilt, and every iteration the used-flags all-reduce (torch also warns of an extra traversal of the "
          f"autograd graph every iteration); at world_size 3 "
          f"{d} of {total} floats end in other bits than the default run's, at world_size 2 {d2} of {total2}", flush=True)


if __name__ == '__main__':
    main()
