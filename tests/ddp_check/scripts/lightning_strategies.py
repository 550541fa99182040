"""A small Lightning Trainer traced by LightningCallback, under one of Lightning's CPU DDP strategies (torch 2.x
venv only: Lightning is not installed for Debian's torch 1.13).

    /opt/ddplab-torch2/bin/python tests/ddp_check/scripts/lightning_strategies.py --strategy ddp_spawn --out RUN_DIR

"ddp" re-runs this script for rank 1 (Lightning's popen launcher), "ddp_spawn" pickles the Trainer and its
callbacks into spawned processes, "ddp_fork" and "ddp_notebook" fork. Each rank must leave a complete manifest
that names the strategy.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "verify"))
from ddplab_trace import LightningCallback  # noqa: E402

import lightning as pl  # noqa: E402


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
        self.loss = nn.CrossEntropyLoss()

    def training_step(self, batch, batch_idx):
        x, y = batch
        return self.loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)  # the same data on every rank; Lightning shards it
        data = torch.utils.data.TensorDataset(torch.randn(32, 6, generator=g), torch.randint(0, 3, (32,), generator=g))
        return torch.utils.data.DataLoader(data, batch_size=4)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", required=True, help="ddp, ddp_spawn, ddp_fork or ddp_notebook")
    p.add_argument("--out", required=True, help="the trace's RUN_DIR")
    a = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    torch.set_num_threads(1)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy=a.strategy, max_epochs=2,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[LightningCallback(a.out)])
    trainer.fit(Module())


if __name__ == "__main__":
    main()
