#!/usr/bin/python3
"""Seed notebook 000 ("Simulating DDP by hand") as a script: the oracle for //sim:two_replica.

The notebook's own PyTorch code, generalised to the C++ program's flags (defaults = the notebook), on CPU with
one thread. It writes the same JSON as `two_replica --dump-params` (keys train_loss, initial, replicas,
one_device; float32 values with 9 significant digits) and prints the same lines.

    /usr/bin/python3 notebooks_ported/000_two_replica/reference.py --dump-params out.json
"""
import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # one BLAS thread: threaded OpenBLAS adds in another order
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset


class RandomTensorDataset(Dataset):
    def __init__(self, num_samples, in_shape, out_shape, seed):
        self.num_samples = num_samples
        torch.manual_seed(seed)
        self.data = [(torch.randn(in_shape), torch.randn(out_shape)) for _ in range(num_samples)]

    def __len__(self):
        return self.num_samples

    def __getitem__(self, idx):
        return self.data[idx]


class MLP(nn.Module):
    def __init__(self, in_feature, hidden_units, out_feature, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.hidden_layer = nn.Linear(in_feature, hidden_units)
        self.output_layer = nn.Linear(hidden_units, out_feature)

    def forward(self, x):
        return self.output_layer(self.hidden_layer(x))


def cmp(s, t1, t2):
    ex = torch.all(t1 == t2).item()
    app = torch.allclose(t1, t2)
    maxdiff = (t1 - t2).abs().max().item()
    print(f'{s:15s} | exact: {str(ex):5s} | approximate: {str(app):5s} | maxdiff: {maxdiff}')


def params(model):
    return [model.hidden_layer.weight, model.hidden_layer.bias,
            model.output_layer.weight, model.output_layer.bias]


def as_json(model):
    def fmt(t):
        if t.dim() == 1:
            return [float('%.9g' % v) for v in t.tolist()]
        return [fmt(row) for row in t]
    return {name: fmt(p.detach()) for name, p in zip(['W1', 'b1', 'W2', 'b2'], params(model))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--replicas', type=int, default=2)
    ap.add_argument('--seed', type=int, default=12345)
    ap.add_argument('--samples', type=int, default=64)
    ap.add_argument('--batch-size', type=int, default=32)
    ap.add_argument('--in-features', type=int, default=6)
    ap.add_argument('--hidden', type=int, default=4)
    ap.add_argument('--out-features', type=int, default=2)
    ap.add_argument('--lr', type=float, default=0.01)
    ap.add_argument('--dump-params')
    a = ap.parse_args()
    torch.set_num_threads(1)
    device = 'cpu'

    dataset = RandomTensorDataset(a.samples, a.in_features, a.out_features, a.seed)
    dataloader = DataLoader(dataset, batch_size=a.batch_size, shuffle=False)
    make = lambda: MLP(a.in_features, a.hidden, a.out_features, a.seed).to(device)
    model = make()
    initial = as_json(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(model.parameters(), lr=a.lr)

    # 2. One epoch on a single device.
    print(f'Using {device} For One Iteration of Forward and Backward Passes Using PyTorch')
    train_loss = 0
    for x, y in dataloader:
        out = model(x)
        loss = loss_fn(out, y)
        train_loss += loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    print(f'epoch 1 | train_loss={train_loss.item():.4f}')

    # 3. R replicas, one batch each, gradients averaged by hand.
    iterator = iter(dataloader)
    batches = [next(iterator) for _ in range(a.replicas)]
    for k, (x, y) in enumerate(batches):
        print(f'x_{k}.shape: {x.shape}, y_{k}.shape: {y.shape}')
    replicas = [make() for _ in range(a.replicas)]
    optimizers = [optim.SGD(m.parameters(), lr=a.lr) for m in replicas]
    for m, o, (x, y) in zip(replicas, optimizers, batches):
        loss = loss_fn(m(x), y)
        o.zero_grad(set_to_none=True)
        loss.backward()
    for i in range(4):
        ps = [params(m)[i] for m in replicas]
        total = ps[0].grad
        for p in ps[1:]:
            total = total + p.grad
        avg = total / a.replicas
        for p in ps:
            p.grad = avg
    for o in optimizers:
        o.step()
    print()
    for k in range(1, a.replicas):
        print(f'# replica {k} vs replica 0 after the averaged step (the notebook\'s table)')
        for name, p, q in zip(['W1', 'b1', 'W2', 'b2'], params(replicas[k]), params(replicas[0])):
            cmp(name, p, q)

    # One device, one step on the R batches concatenated.
    one = make()
    one_opt = optim.SGD(one.parameters(), lr=a.lr)
    x_all = torch.cat([x for x, _ in batches])
    y_all = torch.cat([y for _, y in batches])
    loss = loss_fn(one(x_all), y_all)
    one_opt.zero_grad(set_to_none=True)
    loss.backward()
    one_opt.step()
    print(f'\n# replica 0 vs one device trained in one step on the {a.replicas} batches concatenated')
    for name, p, q in zip(['W1', 'b1', 'W2', 'b2'], params(replicas[0]), params(one)):
        cmp(name, p, q)

    if a.dump_params:
        doc = {'train_loss': float('%.9g' % train_loss.item()), 'initial': initial,
               'replicas': [as_json(m) for m in replicas], 'one_device': as_json(one)}
        d = os.path.dirname(os.path.abspath(a.dump_params))
        fd, tmp = tempfile.mkstemp(dir=d, prefix='.reference.')
        with os.fdopen(fd, 'w') as f:
            json.dump(doc, f)
            f.write('\n')
        os.replace(tmp, a.dump_params)


if __name__ == '__main__':
    sys.exit(main())
