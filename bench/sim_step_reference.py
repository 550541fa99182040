#!/usr/bin/python3
"""PyTorch reference for //bench:sim_step: notebook 000's DDP-by-hand step for R replicas, --threads threads.

--model mlp (--layers): each replica: forward, MSE loss, zero_grad, backward on its own batch; gradients
summed in rank order and divided by R (in place, into every replica's .grad); SGD step.
--model cnn: the digits CNN (src/model/spec.cc's preset) on batches of scikit-learn's digits, in training
mode (BatchNorm's batch statistics, Dropout's masks): before each forward every replica takes replica 0's
buffers (DDP's broadcast_buffers), then forward, cross-entropy, backward; gradients averaged as above;
SGD with momentum 0.9.
--model gpt: issue 17's tiny GPT (sim/gpt_model.py, nanoGPT's model; --n-layer, --n-head, --n-embd,
--block-size, dropout 0, bias, exact GELU) on Debian's GPL-3 text, every replica from the same seed (DDP's
broadcast): nanoGPT's step by hand for R replicas: forward, the next get_batch, backward; gradients averaged
as above; AdamW with nanoGPT's two groups (single-tensor, as the C++ runs it); zero_grad(set_to_none=True).
--ddp (--layers, --activation, --comm-hook, --dump FILE): REAL torch DDP on Gloo, one single-threaded process
per rank on this machine (sim/ddp_reference.py's data, model and seeds; sim/comm_hooks.py registers torch's
hook), rank r stepping on samples r*batch .. (r+1)*batch-1 every step: forward, MSE, backward (the hook runs
here), SGD, zero_grad(set_to_none). Rank 0's step times; --dump gets every rank's parameters after the run,
float32 bytes in rank then named_parameters() order.
Prints `median_ms X` over --steps steps (after one warm-up step). Kernels as torch runs them by default
(oneDNN for these convolutions); only the thread count is set.
"""
import argparse
import gzip
import statistics
import time

import os
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # the bench sets it to --threads
import torch
import torch.nn as nn
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'sim'))
from gpt_model import GPT, GPTConfig, TextData, configure_optimizer  # noqa: E402

DIGITS = '/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz'


def cnn():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Dropout(0.25), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def digits(n):
    """The first n digits as [n, 1, 8, 8] pixels / 16 and their labels."""
    with gzip.open(DIGITS, 'rt') as f:
        rows = [[int(float(v)) for v in line.split(',')] for line in f if line.strip()][:n]
    x = (torch.tensor([r[:64] for r in rows], dtype=torch.float64) / 16).float().view(n, 1, 8, 8)
    return x, torch.tensor([r[64] for r in rows], dtype=torch.int64)


def gpt_median_ms(a):
    """nanoGPT's train.py step for a.replicas replicas by hand (the DDP all-reduce as a rank-order sum / R)."""
    data = TextData('/usr/share/common-licenses/GPL-3')
    cfg = GPTConfig(len(data.vocab), a.block_size, a.n_layer, a.n_head, a.n_embd, 0.0, True, 'none', 0)
    models = []
    for _ in range(a.replicas):
        torch.manual_seed(1337)
        models.append(GPT(cfg))
    opts = [configure_optimizer(m, 0.1, 1e-3, (0.9, 0.95)) for m in models]
    batches = [data.get_batch('train', a.batch, a.block_size)[:2] for _ in models]
    times = []
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        for r, m in enumerate(models):
            _, loss = m(*batches[r])
            batches[r] = data.get_batch('train', a.batch, a.block_size)[:2]  # train.py's prefetch
            loss.backward()
        with torch.no_grad():
            for ps in zip(*[m.parameters() for m in models]):
                total = ps[0].grad.clone()
                for p in ps[1:]:
                    total += p.grad
                total /= a.replicas
                for p in ps:
                    p.grad.copy_(total)
        for o in opts:
            o.step()
            o.zero_grad(set_to_none=True)
        if step > 0:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def ddp_rank(rank, a, work):
    """One Gloo rank of --ddp: writes rank{r}.f32 (parameters) and, on rank 0, median_ms."""
    import datetime
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    import ddp_reference
    from comm_hooks import register_comm_hook
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method='file://' + os.path.join(work, 'rendezvous'), rank=rank,
                            world_size=a.replicas, timeout=datetime.timedelta(seconds=120))
    o = ddp_reference.parse(['--world-size', str(a.replicas), '--layers', a.layers, '--activation', a.activation,
                             '--samples', str(a.replicas * a.batch), '--batch-size', str(a.batch),
                             '--comm-hook', a.comm_hook])
    ds = ddp_reference.make_dataset(o)
    items = [ds[i] for i in range(rank * a.batch, (rank + 1) * a.batch)]
    x, y = torch.stack([i[0] for i in items]), torch.stack([i[1] for i in items])
    torch.manual_seed(o.seed)
    model = ddp_reference.build_model(o)
    ddp = DDP(model, bucket_cap_mb=o.bucket_cap_mb)
    register_comm_hook(ddp, o)
    opt = torch.optim.SGD(ddp.parameters(), lr=o.lr)
    times = []
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        loss = F.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step > 0:
            times.append((time.perf_counter() - t0) * 1e3)
    with open(os.path.join(work, f'rank{rank}.f32'), 'wb') as f:
        for p in model.parameters():
            f.write(p.detach().contiguous().numpy().tobytes())
    if rank == 0:
        with open(os.path.join(work, 'median_ms'), 'w') as f:
            f.write(f'{statistics.median(times):.6f}')
    # Leave at once once every rank is done: tearing DDP down after a hook sometimes hung a rank here (seen
    # with fp16_compress_hook, about 1 run in 3; not investigated further).
    dist.barrier()
    os._exit(0)


def ddp_main(a):
    import shutil
    import tempfile
    import torch.multiprocessing as mp
    work = tempfile.mkdtemp(prefix='sim_step_ddp.')
    try:
        mp.spawn(ddp_rank, args=(a, work), nprocs=a.replicas)
        if a.dump:
            with open(a.dump + '.tmp', 'wb') as out:
                for r in range(a.replicas):
                    with open(os.path.join(work, f'rank{r}.f32'), 'rb') as f:
                        out.write(f.read())
            os.replace(a.dump + '.tmp', a.dump)
        with open(os.path.join(work, 'median_ms')) as f:
            print(f'median_ms {f.read()}')
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--ddp', action='store_true')
    ap.add_argument('--activation', choices=['none', 'relu'], default='none')
    ap.add_argument('--comm-hook', choices=['none', 'allreduce', 'fp16-compress', 'powersgd'], default='none')
    ap.add_argument('--dump')
    ap.add_argument('--model', choices=['mlp', 'cnn', 'gpt'], default='mlp')
    ap.add_argument('--n-layer', type=int, default=4)
    ap.add_argument('--n-head', type=int, default=4)
    ap.add_argument('--n-embd', type=int, default=128)
    ap.add_argument('--block-size', type=int, default=64)
    ap.add_argument('--layers', default='6,4,2')
    ap.add_argument('--replicas', type=int, default=2)
    ap.add_argument('--batch', type=int, default=32)
    ap.add_argument('--steps', type=int, default=100)
    ap.add_argument('--threads', type=int, default=1)
    a = ap.parse_args()
    if a.ddp:
        ddp_main(a)
        return
    torch.set_num_threads(a.threads)  # intra-op threads: PyTorch splits each op, not the replicas
    if a.model == 'gpt':
        print(f'median_ms {gpt_median_ms(a):.6f}')
        return
    sizes = [int(v) for v in a.layers.split(',')]

    def make():
        torch.manual_seed(12345)
        if a.model == 'cnn':
            return cnn()
        return nn.Sequential(*[nn.Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1)])

    models = [make() for _ in range(a.replicas)]
    torch.manual_seed(0)
    if a.model == 'cnn':
        opts = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in models]
        x, labels = digits(a.replicas * a.batch)
        xs, ys = list(x.split(a.batch)), list(labels.split(a.batch))
        loss_fn = nn.CrossEntropyLoss()
    else:
        opts = [torch.optim.SGD(m.parameters(), lr=0.01) for m in models]
        xs = [torch.randn(a.batch, sizes[0]) for _ in range(a.replicas)]
        ys = [torch.randn(a.batch, sizes[-1]) for _ in range(a.replicas)]
        loss_fn = nn.MSELoss()
    times = []
    for step in range(a.steps + 1):
        t0 = time.perf_counter()
        if a.model == 'cnn':
            with torch.no_grad():  # DDP's broadcast_buffers: every replica takes replica 0's buffers
                for m in models[1:]:
                    for b0, b in zip(models[0].buffers(), m.buffers()):
                        b.copy_(b0)
        for m, o, x, y in zip(models, opts, xs, ys):
            loss = loss_fn(m(x), y)
            o.zero_grad(set_to_none=True)
            loss.backward()
        with torch.no_grad():
            for ps in zip(*[m.parameters() for m in models]):
                total = ps[0].grad.clone()
                for p in ps[1:]:
                    total += p.grad
                total /= a.replicas
                for p in ps:
                    p.grad.copy_(total)
        for o in opts:
            o.step()
        if step > 0:
            times.append((time.perf_counter() - t0) * 1e3)
    print(f'median_ms {statistics.median(times):.6f}')


if __name__ == '__main__':
    main()
