#!/usr/bin/python3
"""Seed notebook 001 (DDP on a 5-point toy set) as a runnable script: the oracle for //notebooks_ported/001_toy_ddp.

The notebook's own code, changed only where it cannot run here or has a bug:
  - CPU and the gloo backend instead of cuda/nccl; rendezvous through a file, not MASTER_ADDR/PORT (the
    notebook sets MASTER_ADDR twice and never MASTER_PORT, so env:// initialisation fails);
  - every rank calls torch.manual_seed(123) before building the model: what the notebook's module-level
    manual_seed(123) does in each spawned child, which re-imports the module;
  - sampler.set_epoch(epoch) every epoch (the notebook never calls it); --notebook-bugs restores that.
Writes JSON with --dump FILE: per rank the loss of every batch, final state_dict, accuracies, indices.

    /usr/bin/python3 notebooks_ported/001_toy_ddp/reference.py --world-size 2 --dump out.json
"""
import argparse
import datetime
import os
import sys

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # one BLAS thread: threaded OpenBLAS adds in another order
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# What the labs' reference.py scripts share: notebooks_ported/lab/reference_common.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lab'))
from reference_common import f32, finish_rank, spawn_ranks  # noqa: E402

X_train = torch.tensor([[-1.2, 3.1], [-0.9, 2.9], [-0.5, 2.6], [2.3, -1.1], [2.7, -1.5]])
y_train = torch.tensor([0, 0, 0, 1, 1])
X_test = torch.tensor([[-0.8, 2.8], [2.6, -1.6]])
y_test = torch.tensor([0, 1])


class NeuralNetwork(torch.nn.Module):
    def __init__(self, num_inputs, num_outputs):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(num_inputs, 30), torch.nn.ReLU(),
            torch.nn.Linear(30, 20), torch.nn.ReLU(),
            torch.nn.Linear(20, num_outputs))

    def forward(self, x):
        return self.layers(x)


class ToyDataset(Dataset):
    def __init__(self, X, y):
        self.features, self.labels = X, y

    def __getitem__(self, index):
        return self.features[index], self.labels[index]

    def __len__(self):
        return self.labels.shape[0]


def compute_accuracy(model, dataloader):
    model = model.eval()
    correct, total = 0, 0
    for features, labels in dataloader:
        with torch.no_grad():
            logits = model(features)
        predictions = torch.argmax(logits, dim=1)
        compare = labels == predictions
        correct += torch.sum(compare)
        total += len(compare)
    return (correct / total).item()


def main(rank, world_size, num_epochs, set_epoch, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method='file://' + init_file, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    train_ds, test_ds = ToyDataset(X_train, y_train), ToyDataset(X_test, y_test)
    sampler = DistributedSampler(train_ds)
    train_loader = DataLoader(train_ds, batch_size=2, shuffle=False, drop_last=True, sampler=sampler)
    test_loader = DataLoader(test_ds, batch_size=2, shuffle=False)
    torch.manual_seed(123)
    model = NeuralNetwork(num_inputs=2, num_outputs=2)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.5)
    model = DDP(model)
    losses, indices = [], []
    for epoch in range(num_epochs):
        if set_epoch:
            sampler.set_epoch(epoch)
        indices.append(list(sampler))
        for features, labels in train_loader:
            logits = model(features)
            loss = F.cross_entropy(logits, labels)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(loss.item())
            print(f"[rank{rank}] Epoch: {epoch+1:03d}/{num_epochs:03d} | Batch size {labels.shape[0]:03d}"
                  f" | Train/Val Loss: {loss:.2f}", flush=True)
    model.eval()
    train_acc = compute_accuracy(model, train_loader)
    test_acc = compute_accuracy(model, test_loader)
    finish_rank(rank, out_dir, {'losses': losses, 'indices': indices, 'train_acc': train_acc, 'test_acc': test_acc,
                                'params': {n: f32(p) for n, p in model.module.state_dict().items()}})


if __name__ == '__main__':
    ap = argparse.ArgumentParser()
    ap.add_argument('--world-size', type=int, default=2)
    ap.add_argument('--epochs', type=int, default=3)
    ap.add_argument('--notebook-bugs', action='store_true')
    ap.add_argument('--dump')
    a = ap.parse_args()
    spawn_ranks(main, a.world_size, (a.world_size, a.epochs, not a.notebook_bugs), a.dump)
