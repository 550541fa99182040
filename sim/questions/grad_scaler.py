#!/usr/bin/python3
"""GradScaler under DDP: what every rank scales, unscales, skips and rescales, measured on the installed torch.

torch 2.x runs GradScaler on the CPU (torch.amp.GradScaler('cpu')); torch 1.13's GradScaler is CUDA's only and
disables itself here, which the script reports and stops at.
Real torch DDP (CPU, gloo, --world-size ranks (default 3, 2 or more) forked by torch.multiprocessing.start_processes, fresh file:// rendezvous, 5 s
timeout per collective, 60 s for the script). Model Linear(6,8)-ReLU-Linear(8,1), MSELoss, SGD(lr=0.05), 5 steps,
each rank on its own batches; at step 2 rank 1's batch holds one inf. Two runs, the same data:
  scaled: scaler.scale(loss).backward(); scaler.step(opt); scaler.update()   (init_scale 2^16, the default)
  plain:  loss.backward(); opt.step(), and at step 2 the step skipped by hand
Per step: .grad after the backward (the all-reduce done) against the step's scale x the plain run's; whether each rank
stepped; each rank's scale after update(); the ranks' parameters against each other and the plain run's.

    OPENBLAS_NUM_THREADS=1 /opt/ddplab-torch2/bin/python sim/questions/grad_scaler.py [--world-size 3]
"""
import os

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import forked

WORLD, STEPS, BAD_STEP, BAD_RANK = 3, 5, 2, 1


def batches(rank):
    g = torch.Generator().manual_seed(30 + rank)
    out = []
    for step in range(STEPS):
        x, y = torch.randn(8, 6, generator=g), torch.randn(8, 1, generator=g)
        if step == BAD_STEP and rank == BAD_RANK:
            x[3, 2] = float('inf')
        out.append((x, y))
    return out


def run(rank, scaled):
    torch.manual_seed(0)
    ddp = DDP(nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1)))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler('cpu') if scaled else None
    steps = []
    for step, (x, y) in enumerate(batches(rank)):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        before = [p.detach().clone() for p in ddp.parameters()]
        used = scaler.get_scale() if scaled else 1.0
        if scaled:
            scaler.scale(loss).backward()
            grads = [p.grad.clone() for p in ddp.parameters()]
            scaler.step(opt)
            scaler.update()
            scale = scaler.get_scale()
        else:
            loss.backward()
            grads = [p.grad.clone() for p in ddp.parameters()]
            if step != BAD_STEP:  # what GradScaler does on every rank: skip the step whose .grad is not finite
                opt.step()
            scale = None
        stepped = any(not torch.equal(b, p) for b, p in zip(before, ddp.parameters()))
        steps.append({'grads': grads, 'stepped': stepped, 'scale': scale, 'used': used})
    return steps, [p.detach().clone() for p in ddp.parameters()]


def bits_equal(a, b):
    return all(torch.equal(x.view(torch.int32), y.view(torch.int32)) for x, y in zip(a, b))


def worker(rank, work):
    torch.set_num_threads(1)
    forked.init(rank, work, WORLD)
    scaled, p_scaled = run(rank, True)
    plain, p_plain = run(rank, False)
    flat = torch.cat([p.reshape(-1) for p in p_scaled])
    gathered = [torch.zeros_like(flat) for _ in range(WORLD)]
    dist.all_gather(gathered, flat)
    out = {'stepped': [s['stepped'] for s in scaled], 'scale': [s['scale'] for s in scaled],
           'finite': [all(bool(g.isfinite().all()) for g in s['grads']) for s in scaled],
           'times_scale': [bits_equal(s['grads'], [g * s['used'] for g in q['grads']])
                           for s, q in zip(scaled, plain) if all(bool(g.isfinite().all()) for g in s['grads'])],
           'plain_equal': bits_equal(p_scaled, p_plain),
           'ranks_equal': all(torch.equal(gathered[0], g) for g in gathered)}
    forked.report(work, rank, out)
    forked.leave(work, rank, WORLD)


def main():
    global WORLD
    WORLD = forked.world_size_arg(WORLD, "one rank's inf reaching the others needs")
    version = torch.__version__.split('+')[0]
    if not hasattr(torch, 'amp') or not hasattr(torch.amp, 'GradScaler'):
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            enabled = torch.cuda.amp.GradScaler().is_enabled()
        said = str(w[0].message) if w else 'no warning'
        print(f"answer: torch {version} has no GradScaler for the CPU: torch.cuda.amp.GradScaler() here is "
              f"enabled={enabled} ({said}); the run needs torch 2.x (torch.amp.GradScaler('cpu')) or a GPU")
        return 0
    reports = forked.run(worker, WORLD)
    if reports is None:
        return 1
    r = [reports[k] for k in range(WORLD)]
    print(f"fact: torch {version}, world_size {WORLD}, one inf in rank {BAD_RANK}'s batch at step {BAD_STEP}")
    for k in range(WORLD):
        print(f"fact: rank {k}: .grad finite per step {r[k]['finite']}; stepped {r[k]['stepped']}; "
              f"scale after update() {r[k]['scale']}")
    alike = all(r[k]['stepped'] == r[0]['stepped'] and r[k]['scale'] == r[0]['scale'] for k in range(WORLD))
    skipped = [s for s, ok in enumerate(r[0]['stepped']) if not ok]
    print(f"answer: one rank's inf at step {BAD_STEP} reaches every rank's .grad through DDP's all-reduce, so every "
          f"rank's scaler finds it, skips step(s) {skipped} and halves its scale alike "
          f"({r[0]['scale'][BAD_STEP - 1]:g} -> {r[0]['scale'][BAD_STEP]:g}): every rank the same decisions "
          f"({alike}), the replicas bitwise equal after {STEPS} steps ({all(x['ranks_equal'] for x in r)})")
    times = all(all(x['times_scale']) for x in r)
    print(f"answer: GradScaler unscales what DDP already averaged: .grad after the backward is the scale (2^16, then "
          f"2^15) x the unscaled run's, bit for bit at every finite step on every rank ({times}); a power of two scales exactly, so the "
          f"scaled run ends bitwise equal to the plain run that skips the same step ({all(x['plain_equal'] for x in r)})")
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
