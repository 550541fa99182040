"""Seed notebook 004's "PyTorch Lightning DDP" section, as written, on CPU, traced for ddp_check.

Changes from the notebook, each marked "# ddplab:": Trainer(accelerator="cpu", devices=2) instead of "auto"
(no GPU here), no logger or checkpoint files, and the callback that records the run:
    trainer = pl.Trainer(..., callbacks=[LightningCallback(RUN_DIR)])
Each rank also prints a digest of the toy_x its own ToyDataModule drew, to show whose data it trained on.

    /opt/ddplab-torch2/bin/python notebooks_ported/004_parallelism/lightning_ddp.py --out RUN_DIR
    bazel run //verify:ddp_check -- RUN_DIR
"""
import argparse
import hashlib
import os
import sys

import torch
import torch.nn as nn
import lightning as pl
from lightning.pytorch import LightningModule

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "verify"))
from ddplab_trace import LightningCallback  # noqa: E402  ddplab


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()
        self.fc1 = nn.Linear(100, 10)

    def forward(self, x):
        return self.fc1(x)


class Module(LightningModule):
    def __init__(self):
        super(Module, self).__init__()
        self.model = Model()
        self.criterion = nn.MSELoss()

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self.model(x)
        loss = self.criterion(y_hat, y)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=0.02)


class ToyDataModule(pl.LightningDataModule):
    def __init__(self):
        super().__init__()

    def train_dataloader(self):
        toy_x = torch.randn(1000, 100)
        toy_y = torch.randn(1000, 10)
        # ddplab: whose data is this? One line per rank.
        digest = hashlib.blake2b(toy_x.numpy().tobytes(), digest_size=8).hexdigest()
        print(f"rank {self.trainer.global_rank}: its own toy_x, blake2b {digest}", flush=True)
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(toy_x, toy_y), batch_size=32)


def main(run_dir):
    # MASTER_ADDR
    os.environ["MASTER_ADDR"] = "localhost"
    datamodule = ToyDataModule()
    module = Module()
    trainer = pl.Trainer(accelerator="cpu", devices=2,  # ddplab: "auto" in the notebook; no GPU here
                         max_epochs=1,
                         strategy="ddp",
                         logger=False, enable_checkpointing=False,  # ddplab: no files beside the script
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[LightningCallback(run_dir)],  # ddplab: record the run
                         )
    trainer.fit(module, datamodule=datamodule)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, help="the trace's RUN_DIR")
    main(p.parse_args().out)
