"""Clean run: PyTorch's DCGAN example loop (examples/dcgan/main.py), small and on CPU: two DDP models, each
with its own optimizer and its own trace (RUN_DIR/netD, RUN_DIR/netG). The generator's step backpropagates
through the discriminator after optimizerD.step() and before the next netD.zero_grad(): that backward
reduces netD's gradients too, and zero_grad then clears them. 3 ranks, Adam(betas=(0.5, 0.999)) as the example.

    python3 dcgan.py --out RUN_DIR [--set-to-none] [...the common options]
    ddp_check RUN_DIR/netD; ddp_check RUN_DIR/netG
"""
import os

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import common
from ddplab_trace import DDPTrace

NZ = 8


def main(rank, world_size, args):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(96, 16))  # "images": 16 features
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    netG = DDP(nn.Sequential(nn.Linear(NZ, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh()))
    netD = DDP(nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1), nn.Sigmoid()))
    criterion = nn.BCELoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-3, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-3, betas=(0.5, 0.999))
    traces = []
    if args.trace:  # one trace per DDP model, each with its optimizer
        traces = [DDPTrace(netD, optimizerD, os.path.join(args.out, "netD"), every=args.every, full=args.full),
                  DDPTrace(netG, optimizerG, os.path.join(args.out, "netG"), every=args.every, full=args.full)]
    torch.manual_seed(100 + rank)  # each rank's own noise
    step = 0
    for epoch in range(10):
        sampler.set_epoch(epoch)
        for (real,) in loader:
            b = real.size(0)
            # (1) Update D: maximize log(D(x)) + log(1 - D(G(z)))
            netD.zero_grad(set_to_none=args.set_to_none)
            errD_real = criterion(netD(real).view(-1), torch.full((b,), 1.0))
            errD_real.backward()
            fake = netG(torch.randn(b, NZ))
            errD_fake = criterion(netD(fake.detach()).view(-1), torch.full((b,), 0.0))
            errD_fake.backward()
            optimizerD.step()
            # (2) Update G: maximize log(D(G(z))), through netD
            netG.zero_grad(set_to_none=args.set_to_none)
            errG = criterion(netD(fake).view(-1), torch.full((b,), 1.0))
            errG.backward()
            optimizerG.step()
            step += 1
            if step == args.steps:
                break
        if step == args.steps:
            break
    for t in traces:
        t.close()
    common.save_final_params({"netD/" + n: p.detach().clone() for n, p in netD.module.named_parameters()} |
                             {"netG/" + n: p.detach().clone() for n, p in netG.module.named_parameters()}, args)


def options(p):
    p.add_argument("--set-to-none", action="store_true", help="zero_grad(set_to_none=True) (torch 2.x's default)")


if __name__ == "__main__":
    common.launch(main, common.parse_args(world_size=3, steps=4, extra=options))
