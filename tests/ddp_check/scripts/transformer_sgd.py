"""Clean run: a small transformer (embedding, one nn.TransformerEncoderLayer of width 128, no dropout) on random
tokens, SGD, 3 ranks, 2 buckets."""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace

VOCAB, SEQ, D = 11, 6, 128


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.randn(SEQ, D) * 0.1)
        self.layer = nn.TransformerEncoderLayer(d_model=D, nhead=2, dim_feedforward=1024, dropout=0.0,
                                                batch_first=True)
        self.out = nn.Linear(D, VOCAB)

    def forward(self, tokens):
        h = self.layer(self.embed(tokens) + self.pos)
        return self.out(h)


def main(rank, world_size, args):
    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB, (32, SEQ + 1))
    data = TensorDataset(tokens[:, :-1], tokens[:, 1:])
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)

    ddp = DDP(TinyTransformer())
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            logits = ddp(x)
            loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
            loss.backward()
            optimizer.step()
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    common.save_final(ddp, args)


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=4))
