#!/usr/bin/python3
"""Seed notebook 004's computations in PyTorch: the oracle for //notebooks_ported/004_parallelism.

  - DataParallel, emulated on CPU (nn.DataParallel needs GPUs): Model() (fc1 = Linear(100, 10)) seeded
    67280421310721 as the lab seeds it (the notebook seeds nothing: a fresh process's seed is random), toy_x = randn(1000, 100), toy_y = randn(1000, 10); one device's gradients, and
    DataParallel's: torch.chunk the batch, one replica per chunk, outputs concatenated on device 0, MSE
    there, each replica's gradient summed into device 0 in device order.
  - Tensor parallelism: the unsharded Linear the lab's ColumnParallel/RowParallel layers are checked
    against, from the same generator draws (xavier_uniform_ weight, randn input and upstream gradient).
  - With --ddp: demo_basic, DDP of ToyModel (10-10-ReLU-5) on --world-size gloo processes, one SGD(0.001)
    step on randn(20, 10) -> randn(20, 5). Every rank seeded 67280421310721 as the lab seeds it;
    --notebook-seeding seeds nothing, as the notebook (each rank its own random seed); --rank-seeds S0,S1,...
    seeds rank r with Sr (to replay the lab's --notebook-seeding run). Under "ddp": every rank's seed, loss,
    initial (before DDP) and final parameters.
  - With --zero: the ZeRO section as torch's ZeroRedundancyOptimizer (Adam) runs it on --world-size gloo
    processes: "zero.<name>" rank 0's final parameters, "zero.state_numel" Adam's state floats per rank.
Writes every tensor as JSON with --dump FILE; keys match the lab's --dump.

    /usr/bin/python3 notebooks_ported/004_parallelism/reference.py --world-size 2 --dp-devices 2 --dump out.json
"""
import argparse
import copy
import datetime
import json
import math
import os
import sys
import tempfile

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # one BLAS thread: threaded OpenBLAS adds in another order
import torch
import torch.nn as nn
import torch.distributed as dist
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP

# What the labs' reference.py scripts share: notebooks_ported/lab/reference_common.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lab'))
from reference_common import finish_rank, spawn_ranks  # noqa: E402


def f32(t):
    return [float('%.9g' % v) for v in t.detach().flatten().tolist()]


def data_parallel(devices):
    torch.manual_seed(67280421310721)
    net = nn.Linear(100, 10)
    x, y = torch.randn(1000, 100), torch.randn(1000, 10)
    single = copy.deepcopy(net)
    F.mse_loss(single(x), y).backward()
    replicas = [copy.deepcopy(net) for _ in range(devices)]
    chunks = torch.chunk(x, devices)
    outs = [rep(c) for rep, c in zip(replicas, chunks)]
    F.mse_loss(torch.cat(outs), y).backward()
    gw = replicas[0].weight.grad.clone()
    gb = replicas[0].bias.grad.clone()
    for rep in replicas[1:]:
        gw += rep.weight.grad
        gb += rep.bias.grad
    return {'dp.output': f32(torch.cat(outs)), 'single.output': f32(single(x)),
            'dp.weight.grad': f32(gw), 'dp.bias.grad': f32(gb),
            'single.weight.grad': f32(single.weight.grad), 'single.bias.grad': f32(single.bias.grad)}


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(rank, world_size, seeds, init_file, out_dir):
    torch.set_num_threads(1)
    if seeds != 'none':  # 'none': the notebook's seeding, i.e. none; the process's own seed stays
        torch.manual_seed(seeds[rank])
    seed = torch.initial_seed()
    dist.init_process_group('gloo', init_method='file://' + init_file, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    model = ToyModel()
    initial = {n: f32(p) for n, p in model.state_dict().items()}
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5)
    loss = loss_fn(outputs, labels)
    loss.backward()
    optimizer.step()
    finish_rank(rank, out_dir, {'seed': seed, 'loss': loss.item(), 'initial': initial,
                                'params': {n: f32(p) for n, p in model.state_dict().items()}})


def zero_part(rank, world_size, init_file, out_dir):
    """ZeRO-1 as torch's ZeroRedundancyOptimizer, as the lab's zero section runs it: an 8-16-ReLU-4 MLP seeded
    67280421310721, each rank's own 3 batches (Generator seeded 1000 + rank: randn(8, 8), randn(8, 4) per step),
    DDP's averaged gradient (grad * (1/n) then a SUM all-reduce of the flat gradients), Adam(lr 0.01)."""
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method='file://' + init_file, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    from torch.distributed.optim import ZeroRedundancyOptimizer
    torch.manual_seed(67280421310721)
    model = nn.Module()
    model.layers = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    g = torch.Generator()
    g.manual_seed(1000 + rank)
    batches = [(torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)) for _ in range(3)]
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optim.Adam, lr=0.01)
    params = list(model.parameters())
    for x, y in batches:
        opt.zero_grad()
        F.mse_loss(model.layers(x), y).backward()
        flat = torch.cat([p.grad.flatten() for p in params]) * (1.0 / world_size)
        dist.all_reduce(flat)
        o = 0
        for p in params:
            p.grad.copy_(flat[o:o + p.numel()].view_as(p))
            o += p.numel()
        opt.step()
    names = {id(p): n for n, p in model.named_parameters()}
    state = sum(t.numel() for st in opt.optim.state.values() for t in st.values() if torch.is_tensor(t) and t.dim() > 0)
    finish_rank(rank, out_dir, {'params': {n: f32(p) for n, p in model.named_parameters()}, 'state_numel': state,
                                'partition': [[names[id(p)] for grp in groups for p in grp['params']]
                                              for groups in opt._partition_parameters()]})


def tp_data(out, inp):
    g = torch.Generator()
    g.manual_seed(2024)
    bound = math.sqrt(6.0 / (inp + out))
    w = torch.empty(out, inp).uniform_(-bound, bound, generator=g)
    x = torch.randn(6, inp, generator=g)
    grad = torch.randn(6, out, generator=g)
    return w, x, grad


def tensor_parallel(n):
    doc = {}
    w, x, g = tp_data(4 * n, 12)
    doc['column.output'] = f32(x @ w.t())
    doc['column.weight.grad'] = f32(g.t() @ x)
    doc['column.input.grad'] = f32(g @ w)
    w, x, g = tp_data(5, 4 * n)
    doc['row.output'] = f32(x @ w.t())
    doc['row.weight.grad'] = f32(g.t() @ x)
    doc['row.input.grad'] = f32(g @ w)
    return doc


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--world-size', type=int, default=2)
    ap.add_argument('--dp-devices', type=int, default=2)
    ap.add_argument('--ddp', action='store_true', help='also run demo_basic under DDP')
    ap.add_argument('--notebook-seeding', action='store_true', help='--ddp with no manual_seed: each rank its own')
    ap.add_argument('--rank-seeds', help='--ddp with manual_seed(Sr) on rank r: S0,S1,...')
    ap.add_argument('--zero', action='store_true', help="also run the ZeRO part with ZeroRedundancyOptimizer")
    ap.add_argument('--dump')
    a = ap.parse_args()
    torch.set_num_threads(1)
    doc = {**data_parallel(a.dp_devices), **tensor_parallel(a.world_size)}
    if a.ddp or a.notebook_seeding or a.rank_seeds:
        seeds = [67280421310721] * a.world_size
        if a.notebook_seeding:
            seeds = 'none'
        elif a.rank_seeds:
            seeds = [int(s) for s in a.rank_seeds.split(',')]
            if len(seeds) != a.world_size:
                ap.error(f'--rank-seeds has {len(seeds)} seeds for --world-size {a.world_size}')
        with tempfile.TemporaryDirectory() as d:
            ddp_file = os.path.join(d, 'ddp.json')
            spawn_ranks(demo_basic, a.world_size, (a.world_size, seeds), ddp_file)
            doc['ddp'] = json.load(open(ddp_file))
    if a.zero:
        with tempfile.TemporaryDirectory() as d:
            zero_file = os.path.join(d, 'zero.json')
            spawn_ranks(zero_part, a.world_size, (a.world_size,), zero_file)
            ranks = json.load(open(zero_file))['ranks']
        doc.update({'zero.' + n: v for n, v in ranks[0]['params'].items()})
        doc['zero.state_numel'] = [float(r['state_numel']) for r in ranks]
        print('ZeroRedundancyOptimizer partition:', ranks[0]['partition'], 'state per rank:',
              [r['state_numel'] for r in ranks])
    if a.dump:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(a.dump)))
        with os.fdopen(fd, 'w') as f:
            json.dump(doc, f)
        os.replace(tmp, a.dump)
