"""PyTorch's DDP tutorial series' torchrun trainer, as it is written today: at the start of every epoch it reads the
batch size from the loader, `b_sz = len(next(iter(self.train_data))[0])`, then calls
`self.train_data.sampler.set_epoch(epoch)` and trains. The peek iterates the loader without training: it is no
epoch. Clean with set_epoch (3 epochs of 2 batches per rank, 3 ranks); --no-set-epoch drops the call: then every
epoch trains in the same order, first seen at step 2 (epoch 1's first step).

    python3 tutorial_peek.py --out RUN_DIR [--no-set-epoch] [...the common options]
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace


class Trainer:  # the tutorial's, on CPU
    def __init__(self, model, train_data, optimizer, set_epoch):
        self.model, self.train_data, self.optimizer, self.set_epoch = DDP(model), train_data, optimizer, set_epoch

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])  # noqa: F841  the tutorial prints it
        if self.set_epoch:
            self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source, targets)


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(16, 6), torch.randint(0, 3, (16,)))
    loader = DataLoader(data, batch_size=4, shuffle=False,
                        sampler=DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0))
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))
    trainer = Trainer(model, loader, None, args.set_epoch)
    trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=0.1)
    trace = DDPTrace(trainer.model, trainer.optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    for epoch in range(3):
        trainer._run_epoch(epoch)
    if trace:
        trace.close()
    common.save_final(trainer.model, args)


def options(p):
    p.add_argument("--no-set-epoch", dest="set_epoch", action="store_false")


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=6, extra=options))
