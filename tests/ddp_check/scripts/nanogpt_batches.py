"""nanoGPT's way to draw data, without a DataLoader: every step get_batch() picks random windows of a token
stream with torch.randint, and each rank seeds torch.manual_seed(1337 + seed_offset) with seed_offset = rank
(train.py). Clean; --same-seed gives every rank seed_offset 0, the mistake: every rank draws the same windows.
--rank0-eval: rank 0 alone draws an evaluation batch first (nanoGPT's master process estimating the loss), so
with --same-seed its batches differ from the others' while ranks 1 and 2 still draw the same ones.
--coincide N: ranks 1 and 2 draw the same windows (a generator they share) at N steps, every other step, and
their own elsewhere: more than chance gives, fewer than a shared seed does.
A tiny language model (Embedding, Linear over the window), AdamW, 3 ranks.

    python3 nanogpt_batches.py --out RUN_DIR [--same-seed] [...the common options]
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import common
from ddplab_trace import DDPTrace

BLOCK, BATCH, VOCAB = 8, 4, 32


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, 16)
        self.head = nn.Linear(16, VOCAB)

    def forward(self, idx):
        return self.head(self.wte(idx))


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = torch.randint(0, VOCAB, (400,))  # the token stream (train.bin)
    torch.manual_seed(0)
    model = DDP(Tiny())
    seed_offset = 0 if args.same_seed else rank
    torch.manual_seed(1337 + seed_offset)

    def get_batch(shared=None):
        ix = torch.randint(len(data) - BLOCK, (BATCH,), generator=shared)
        x = torch.stack([data[i:i + BLOCK] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + BLOCK] for i in ix])
        return x, y

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    trace = DDPTrace(model, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    if args.rank0_eval and rank == 0:
        with torch.no_grad():
            x, y = get_batch()
            F.cross_entropy(model(x).view(-1, VOCAB), y.view(-1))
    for step in range(args.steps):
        alike = rank in (1, 2) and step % 2 == 1 and step // 2 < args.coincide
        x, y = get_batch(torch.Generator().manual_seed(99 + step) if alike else None)
        loss = F.cross_entropy(model(x).view(-1, VOCAB), y.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    if trace:
        trace.close()
    common.save_final(model, args)


def options(p):
    p.add_argument("--same-seed", action="store_true", help="seed_offset 0 on every rank (the mistake)")
    p.add_argument("--rank0-eval", action="store_true", help="rank 0 draws an evaluation batch first")
    p.add_argument("--coincide", type=int, default=0, help="ranks 1 and 2 draw alike at this many steps")


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=5, extra=options))
