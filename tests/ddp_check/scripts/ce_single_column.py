"""Mistake, as in the DDP tutorial series' trainer (pytorch/examples distributed/ddp-tutorial-series: a
torch.nn.Linear(20, 1) on MyTrainDataset's (torch.rand(20), torch.rand(1)) pairs, F.cross_entropy(output, targets),
SGD lr 1e-3): cross-entropy over ONE output column with float (probability) targets. softmax of one column is 1,
so the loss is 0 whatever the parameters and every gradient is exactly 0 (measured on torch 1.13 and 2.x): nothing
trains. DistributedSampler, 2 ranks."""
import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import common
from ddplab_trace import DDPTrace


class MyTrainDataset(Dataset):  # the tutorial's
    def __init__(self, size):
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]


def main(rank, world_size, args):
    torch.manual_seed(0)
    dataset = MyTrainDataset(64)
    loader = DataLoader(dataset, batch_size=8, pin_memory=False, shuffle=False, sampler=DistributedSampler(dataset))
    ddp = DDP(torch.nn.Linear(20, 1))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)

    trace = DDPTrace(ddp, optimizer, args.out, every=args.every, full=args.full) if args.trace else None
    step = 0
    for epoch in range(100):
        loader.sampler.set_epoch(epoch)
        for source, targets in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(ddp(source), targets)  # the mistake: one column, float targets
            loss.backward()
            optimizer.step()
            if rank == 0 and step == 0:
                print("loss %r, grad max |.| %r" % (loss.item(), max(p.grad.abs().max().item() for p in ddp.parameters())),
                      flush=True)
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    if trace:
        trace.close()
    common.save_final(ddp, args)


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=2, steps=4))
