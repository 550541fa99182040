"""Mistake, as in the minGPT DDP trainer (pytorch/examples distributed/minGPT-ddp): a character dataset of
overlapping windows, split into train and validation sets with torch.utils.data.random_split and no generator on
every rank, a DistributedSampler over each split, AdamW with minGPT's two parameter groups, gradient clipping,
and after the epoch a validation pass of the DDP model under torch.no_grad(). 2 ranks.

Measured (torch 1.13 and 2.x): no torch.manual_seed runs before the split, and a fresh process's default generator
is seeded at random (torch.initial_seed() differs in every spawned rank), so every rank draws its own split. Each
rank's DistributedSampler then shards a different subset: the ranks' training samples overlap, and one rank's
validation samples are another's training samples. The text repeats (a song's verses): 670 windows of 9
characters, only 314 distinct, so the repeated samples must neither hide nor fake an overlap.

--seed S: each rank calls torch.manual_seed(S + rank) first, standing in for the fresh process's random seed, so
that a rerun draws the same splits (traced_equals_untraced.py uses it). --steps 0 (the default): whole epochs
(--epochs, default 1: 10 steps of 32 samples per rank)."""
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler, random_split

import common
from ddplab_trace import DDPTrace

TEXT = (
    "the wheels on the bus go round and round,\n"
    "round and round, round and round.\n"
    "the wheels on the bus go round and round,\n"
    "all through the town.\n"
    "the wipers on the bus go swish swish swish,\n"
    "swish swish swish, swish swish swish.\n"
    "the wipers on the bus go swish swish swish,\n"
    "all through the town.\n"
    "the horn on the bus goes beep beep beep,\n"
    "beep beep beep, beep beep beep.\n"
    "the horn on the bus goes beep beep beep,\n"
    "all through the town.\n"
    "the doors on the bus go open and shut,\n"
    "open and shut, open and shut.\n"
    "the doors on the bus go open and shut,\n"
    "all through the town.\n"
    "the babies on the bus go wah wah wah,\n"
    "wah wah wah, wah wah wah.\n"
    "the babies on the bus go wah wah wah,\n"
    "all through the town.\n"
)


class CharDataset(Dataset):  # minGPT's
    def __init__(self, data, block_size):
        chars = sorted(set(data))
        self.stoi = {ch: i for i, ch in enumerate(chars)}
        self.vocab_size = len(chars)
        self.block_size = block_size
        self.data = data

    def __len__(self):
        return len(self.data) - self.block_size

    def __getitem__(self, idx):
        dix = [self.stoi[s] for s in self.data[idx:idx + self.block_size + 1]]
        return torch.tensor(dix[:-1], dtype=torch.long), torch.tensor(dix[1:], dtype=torch.long)


class TinyGPT(nn.Module):
    def __init__(self, vocab_size, block_size, d=32):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d)
        self.pos = nn.Parameter(torch.zeros(1, block_size, d))
        self.block = nn.TransformerEncoderLayer(d_model=d, nhead=2, dim_feedforward=4 * d, dropout=0.0,
                                                batch_first=True)
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab_size, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((block_size, block_size), float("-inf")), diagonal=1))

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        h = self.block(self.tok(idx) + self.pos[:, :t], src_mask=self.mask[:t, :t])
        logits = self.head(self.ln_f(h))
        loss = None
        if targets is not None:
            loss = nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def create_optimizer(model, lr=3e-3, weight_decay=0.1):  # minGPT's: no decay for biases, norms, embeddings
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "tok" not in name and name != "pos" else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))


def main(rank, world_size, args):
    if args.seed is not None:
        torch.manual_seed(args.seed + rank)
    dataset = CharDataset(TEXT, block_size=8)
    train_len = int(len(dataset) * 0.9)
    train_set, test_set = random_split(dataset, [train_len, len(dataset) - train_len])  # the mistake
    train_loader = DataLoader(train_set, batch_size=32, shuffle=False, num_workers=2,
                              sampler=DistributedSampler(train_set))
    test_loader = DataLoader(test_set, batch_size=32, shuffle=False, num_workers=2,
                             sampler=DistributedSampler(test_set))

    model = TinyGPT(dataset.vocab_size, dataset.block_size)
    optimizer = create_optimizer(model)
    ddp = DDP(model)

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(args.epochs):
        train_loader.sampler.set_epoch(epoch)
        for source, targets in train_loader:
            _, loss = ddp(source, targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
            optimizer.step()
            step += 1
            if step == args.steps:
                break
        test_loader.sampler.set_epoch(epoch)
        with torch.no_grad():
            val = [ddp(source, targets)[1].item() for source, targets in test_loader]
        if rank == 0:
            print("epoch %d: validation loss %.4f" % (epoch, sum(val) / len(val)), flush=True)
        if step == args.steps:
            break
    if trace:
        trace.close()
    common.save_final(ddp, args)


def options(p):
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, help="torch.manual_seed(SEED + rank) first (default: none, as minGPT)")


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=2, steps=0, extra=options))
