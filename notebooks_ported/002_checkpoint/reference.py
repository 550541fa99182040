#!/usr/bin/python3
"""Seed notebook 002 (demo_training_with_checkpoint) as a runnable script: the oracle for
//notebooks_ported/002_checkpoint.

The notebook's code on CPU with gloo (file rendezvous instead of MASTER_ADDR/PORT, no map_location: CPU).
The notebook seeds nothing, so each of its ranks starts from its own random seed (torch 1.13 seeds a fresh
process from /dev/urandom: ../lab/fresh_seeds.py); this script, like the lab, seeds every rank with
67280421310721 so that the two can be compared. SimpleLinearModel draws Linear(10, 10), then the step draws
randn(20, 10) inputs and labels. Rank 0 saves ddp_model.state_dict(), barrier, every
rank loads it, one SGD(lr=0.001) step. --dump FILE writes rank 0's loss and final parameters.

    /usr/bin/python3 notebooks_ported/002_checkpoint/reference.py --world-size 2 --dump out.json
"""
import argparse
import datetime
import json
import os
import tempfile

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # one BLAS thread: threaded OpenBLAS adds in another order
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


class SimpleLinearModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(10, 10)

    def forward(self, x):
        return self.net(x)


def f32(t):
    return [float('%.9g' % v) for v in t.detach().flatten().tolist()]


def demo(rank, world_size, init_file, out_dir):
    torch.set_num_threads(1)
    torch.manual_seed(67280421310721)  # the lab's fixed seed; the notebook sets none
    dist.init_process_group('gloo', init_method='file://' + init_file, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    model = SimpleLinearModel()
    ddp_model = DDP(model)
    chk = os.path.join(out_dir, 'model.checkpoint')
    if rank == 0:
        torch.save(ddp_model.state_dict(), chk)
    dist.barrier()
    ddp_model.load_state_dict(torch.load(chk))
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 10)
    loss = loss_fn(outputs, labels)
    loss.backward()
    optimizer.step()
    if rank == 0:
        with open(os.path.join(out_dir, 'rank0.json'), 'w') as f:
            json.dump({'loss': loss.item(), 'params': {n: f32(p) for n, p in model.state_dict().items()}}, f)
    dist.barrier()  # no rank tears down while a peer is in its last collective (torch 1.13 aborts it)
    dist.destroy_process_group()


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--world-size', type=int, default=2)
    ap.add_argument('--dump')
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(demo, args=(a.world_size, os.path.join(d, 'init'), d), nprocs=a.world_size, join=True)
        doc = json.load(open(os.path.join(d, 'rank0.json')))
    print(f"rank 0 loss {doc['loss']}")
    if a.dump:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(a.dump)))
        with os.fdopen(fd, 'w') as f:
            json.dump(doc, f)
        os.replace(tmp, a.dump)
