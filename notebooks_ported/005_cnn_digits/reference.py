#!/usr/bin/python3
"""Lab 005's claims in PyTorch: the digits CNN under real torch DDP (gloo, 2 processes or --world-size N, one thread each), run
as the lab runs it (SGD lr 0.05 momentum 0.9, batch 32 per rank, 1 epoch, manual_seed(12345) on every rank):

  buffers: every rank vs rank 0 after DDP(model).eval()'s forward, with broadcast_buffers True and False;
  masks:   how many elements of the last training step's Dropout mask differ between rank 0 and the others,
           with every rank seeded alike and with manual_seed(seed + rank) after DDP(model);
  syncbn:  what torch says when SyncBatchNorm trains on CPU inside the process group (outside one, torch 2.x
           falls back to BatchNorm's arithmetic: no process group, nothing to sync).

    /usr/bin/python3 notebooks_ported/005_cnn_digits/reference.py [--world-size 2]
Prints one line per claim; the test compares them with the lab's.
"""
import os
import sys

os.environ.update(OPENBLAS_CORETYPE='Prescott', OPENBLAS_NUM_THREADS='1', ATEN_CPU_CAPABILITY='avx2',
                  ONEDNN_MAX_CPU_ISA='AVX2')
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'sim'))
import argparse  # noqa: E402
import tempfile  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

import ddp_reference  # noqa: E402  (the oracle's digits loader and model builder)

WORLD = 2


def worker(rank, init_file, out_dir, broadcast_buffers, seed_per_rank, world):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method='file://' + init_file, rank=rank, world_size=world)
    a = ddp_reference.parse(['--dataset', 'digits', '--model', 'cnn', '--loss', 'ce'])
    train, (x_test, y_test) = ddp_reference.load_digits(a)
    torch.manual_seed(12345)
    model = ddp_reference.build_model(a)
    ddp = DDP(model, broadcast_buffers=broadcast_buffers)
    if seed_per_rank:
        torch.manual_seed(12345 + rank)
    masks, state = [], []
    # Dropout's mask exactly: redraw its bernoulli_(1 - p) from the generator state it started from.
    model[9].register_forward_pre_hook(lambda m, i: state.append(torch.get_rng_state()))

    def record(m, i, o):
        if not m.training:  # eval draws nothing
            return
        after = torch.get_rng_state()
        torch.set_rng_state(state[-1])
        masks.append(torch.empty_like(o).bernoulli_(1 - m.p))
        torch.set_rng_state(after)
    model[9].register_forward_hook(record)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    for x, y in DataLoader(train, batch_size=32, sampler=sampler):
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    ddp.eval()
    with torch.no_grad():
        correct = int((ddp(x_test).argmax(1) == y_test).sum())
    try:
        nn.SyncBatchNorm(8)(torch.randn(4, 8, 2, 2))
        syncbn = 'ran on CPU'
    except Exception as e:  # noqa: BLE001 - the message is the point
        syncbn = f'{type(e).__name__}: {e}'
    torch.save({'mask': masks[-1], 'params': [p.detach() for p in model.parameters()],
                'buffers': [b.detach() for b in model.buffers()], 'correct': correct, 'syncbn': syncbn},
               os.path.join(out_dir, f'rank{rank}.pt'))
    dist.barrier()  # no rank tears down while a peer is in its last collective (torch 1.13 aborts it)
    dist.destroy_process_group()


def run(broadcast_buffers, seed_per_rank):
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(os.path.join(d, 'init'), d, broadcast_buffers, seed_per_rank, WORLD), nprocs=WORLD)
        return [torch.load(os.path.join(d, f'rank{r}.pt')) for r in range(WORLD)]


def equal(r, key):  # every rank's tensors bitwise rank 0's
    return all(torch.equal(x, y) for o in r[1:] for x, y in zip(r[0][key], o[key]))


def main():
    global WORLD
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--world-size', type=int, default=WORLD)
    WORLD = p.parse_args().world_size
    if WORLD < 2:
        p.exit(2, f'reference.py: --world-size {WORLD}: rank against rank needs 2 ranks or more\n')
    for bb in (True, False):
        r = run(bb, False)
        print(f"buffers broadcast_buffers={bb}: parameters exact: {equal(r, 'params')} | "
              f"buffers exact: {equal(r, 'buffers')} | correct {' '.join(str(o['correct']) for o in r)}")
    for per_rank in (False, True):
        r = run(True, per_rank)
        differ = sum(int((r[0]['mask'] != o['mask']).sum()) for o in r[1:])  # summed over ranks 1.. against rank 0
        print(f"masks seed_per_rank={per_rank}: {differ} of {r[0]['mask'].numel() * (WORLD - 1)} differ | "
              f"parameters exact: {equal(r, 'params')}")
    print(f"syncbn: {r[0]['syncbn']}")


if __name__ == '__main__':
    main()
