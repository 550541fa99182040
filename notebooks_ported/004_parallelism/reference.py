#!/usr/bin/python3
"""Seed notebook 004's computations in PyTorch: the oracle for //notebooks_ported/004_parallelism.

  - DataParallel, emulated on CPU (nn.DataParallel needs GPUs): Model() (fc1 = Linear(100, 10)) from
    torch's default seed, toy_x = randn(1000, 100), toy_y = randn(1000, 10); one device's gradients, and
    DataParallel's: torch.chunk the batch, one replica per chunk, outputs concatenated on device 0, MSE
    there, each replica's gradient summed into device 0 in device order.
  - Tensor parallelism: the unsharded Linear the lab's ColumnParallel/RowParallel layers are checked
    against, from the same generator draws (xavier_uniform_ weight, randn input and upstream gradient).
Writes every tensor as JSON with --dump FILE; keys match the lab's --dump.

    /usr/bin/python3 notebooks_ported/004_parallelism/reference.py --world-size 2 --dp-devices 2 --dump out.json
"""
import argparse
import copy
import json
import math
import os
import tempfile

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # one BLAS thread: threaded OpenBLAS adds in another order
import torch
import torch.nn as nn
import torch.nn.functional as F


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
    return {'dp.weight.grad': f32(gw), 'dp.bias.grad': f32(gb),
            'single.weight.grad': f32(single.weight.grad), 'single.bias.grad': f32(single.bias.grad)}


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
    ap.add_argument('--dump')
    a = ap.parse_args()
    torch.set_num_threads(1)
    doc = {**data_parallel(a.dp_devices), **tensor_parallel(a.world_size)}
    if a.dump:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(a.dump)))
        with os.fdopen(fd, 'w') as f:
            json.dump(doc, f)
        os.replace(tmp, a.dump)
