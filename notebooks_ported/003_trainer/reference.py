#!/usr/bin/python3
"""Seed notebook 003 (a Trainer class over DDP) as a runnable script: the oracle for //notebooks_ported/003_trainer.

The notebook's code on CPU with gloo (file rendezvous). The notebook calls no manual_seed, so each of its ranks
starts from its own random seed (torch 1.13 seeds a fresh process from /dev/urandom: ../lab/fresh_seeds.py).
By default this script, like the lab, seeds every rank with 67280421310721 (a new torch.Generator()'s seed)
so that the two can be compared; --notebook-seeding seeds nothing, as the notebook; --rank-seeds S0,S1,...
seeds rank r with Sr (what the lab's --notebook-seeding printed, to replay its run). MyTrainDataset(2048)
draws rand(20), rand(1) per sample, then Linear(20, 1) draws its weights from the same stream. Two things
in the notebook are bugs:
  - DataLoader(shuffle=True, sampler=DistributedSampler(...)) raises ValueError; this script passes
    shuffle=False unless --notebook-bugs, which shows the error;
  - F.cross_entropy on one output column with float targets treats them as class probabilities: the loss
    is 0 and every gradient 0, so nothing is learned. --loss ce-probs (the notebook's) or mse (the fix).
Prints the notebook's per-epoch lines; --dump FILE writes per rank the seed, losses, initial and final parameters.
"""
import argparse
import datetime
import os
import sys

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # one BLAS thread: threaded OpenBLAS adds in another order
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

# What the labs' reference.py scripts share: notebooks_ported/lab/reference_common.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lab'))
from reference_common import f32, finish_rank, spawn_ranks  # noqa: E402


class MyTrainDataset(Dataset):
    def __init__(self, size):
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]


def main(rank, world_size, max_epochs, batch_size, loss_name, bugs, seeds, init_file, out_dir):
    torch.set_num_threads(1)
    if seeds != 'none':  # 'none': the notebook's seeding, i.e. none; the process's own seed stays
        torch.manual_seed(seeds[rank])
    seed = torch.initial_seed()
    dist.init_process_group('gloo', init_method='file://' + init_file, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    train_dataset = MyTrainDataset(2048)
    try:
        train_dataloader = DataLoader(train_dataset, batch_size=batch_size, shuffle=bugs,
                                      sampler=DistributedSampler(train_dataset))
    except ValueError as e:
        print(f'ValueError: {e}', flush=True)
        raise SystemExit(1)
    model = torch.nn.Linear(20, 1)
    initial = {n: f32(p) for n, p in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    model = DistributedDataParallel(model)
    losses = []
    for epoch in range(max_epochs):
        b = len(next(iter(train_dataloader))[0])
        print(f"[CPU: {rank} Epoch: {epoch}, Batch size: {b} | Steps {len(train_dataloader)}]", flush=True)
        train_dataloader.sampler.set_epoch(epoch)
        for xs, ys in train_dataloader:
            optimizer.zero_grad()
            output = model(xs)
            loss = F.cross_entropy(output, ys) if loss_name == 'ce-probs' else F.mse_loss(output, ys)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    finish_rank(rank, out_dir, {'seed': seed, 'losses': losses, 'initial': initial,
                                'params': {n: f32(p) for n, p in model.module.state_dict().items()}})


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--world-size', type=int, default=4)
    ap.add_argument('--max-epochs', type=int, default=5)
    ap.add_argument('--batch-size', type=int, default=32)
    ap.add_argument('--loss', choices=['mse', 'ce-probs'], default='mse')
    ap.add_argument('--notebook-bugs', action='store_true')
    ap.add_argument('--notebook-seeding', action='store_true', help='no manual_seed: each rank its own seed')
    ap.add_argument('--rank-seeds', help='S0,S1,...: manual_seed(Sr) on rank r')
    ap.add_argument('--dump')
    a = ap.parse_args()
    seeds = [67280421310721] * a.world_size
    if a.notebook_seeding:
        seeds = 'none'
    elif a.rank_seeds:
        seeds = [int(s) for s in a.rank_seeds.split(',')]
        if len(seeds) != a.world_size:
            ap.error(f'--rank-seeds has {len(seeds)} seeds for --world-size {a.world_size}')
    spawn_ranks(main, a.world_size, (a.world_size, a.max_epochs, a.batch_size, a.loss, a.notebook_bugs, seeds),
                a.dump)
