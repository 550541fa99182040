#!/usr/bin/python3
"""Checkpointing a DDP model: state_dict keys, strict-load errors, the fixes, map_location, exact resume.

Real torch DDP (CPU, gloo, 2 and 3 ranks forked by torch.multiprocessing.start_processes, fresh file://
rendezvous, 5 s timeout per collective, 90 s for the script). Model Linear(4,8)-BatchNorm1d(8)-ReLU-Linear(8,1).
  keys:    DDP(model).state_dict() keys carry "module."; ddp.module.state_dict() keys do not.
  strict:  the first lines of the error from loading one into the other with strict=True; the fixes.
  map:     a checkpoint whose storages are tagged 'cuda:0' (written by a tagger registered for this demo, as
           if saved on a GPU) loaded on this CPU-only machine without / with map_location.
  resume:  2 and 3 ranks, DistributedSampler(shuffle=True) + set_epoch, SGD(momentum=0.9), 3 epochs; a run
           stopped after epoch 1 (rank 0 saves ddp.module.state_dict(), optimizer.state_dict(), epoch),
           resumed in fresh processes, against the uninterrupted run: at 2 ranks bit for bit; at 3 the new
           DDP's first iteration all-reduces in the model-order bucket layout (DDP rebuilds it in gradient-ready
           order after its first iteration), so the last bits move, and the uninterrupted run that builds
           DDP(model) again at the same epoch equals the resumed one; without the optimizer state (momentum
           buffers) neither equals.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 sim/questions/checkpoint_keys.py
"""
import datetime
import io
import json
import os
import shutil
import tempfile
import time

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.serialization
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import forked

EPOCHS = 3


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))


def err(fn):
    try:
        fn()
        return 'no error'
    except Exception as e:  # noqa: BLE001
        return ' | '.join(ln.strip() for ln in str(e).splitlines()[:3])


def keys_and_map(work):
    ddp = DDP(make_model())
    sd, msd = ddp.state_dict(), ddp.module.state_dict()
    out = [f'fact: ddp.state_dict() keys: {" ".join(sd)}', f'fact: ddp.module.state_dict() keys: {" ".join(msd)}']
    out.append(f'fact: load DDP state_dict into plain model strict=True: {err(lambda: make_model().load_state_dict(sd))}')
    out.append(f'fact: load plain state_dict into DDP strict=True: {err(lambda: ddp.load_state_dict(msd))}')
    r = make_model().load_state_dict(sd, strict=False)
    out.append(f'fact: strict=False loads nothing: {len(r.missing_keys)} missing, {len(r.unexpected_keys)} unexpected')
    fixed = dict(sd)
    consume_prefix_in_state_dict_if_present(fixed, 'module.')
    plain = make_model()
    for p in plain.parameters():
        p.data.fill_(7.0)
    out.append(f'fact: consume_prefix_in_state_dict_if_present(sd, "module.") then strict load: {plain.load_state_dict(fixed)}'
               f', equal={all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), msd.values()))}')
    # a checkpoint as a GPU run writes it: every storage's location tag is 'cuda:0'
    tagger = (1, lambda obj: 'cuda:0' if obj.device.type == 'cpu' else None, lambda obj, loc: None)
    torch.serialization._package_registry.insert(0, tagger)
    buf = io.BytesIO()
    torch.save({'model': msd}, buf)
    torch.serialization._package_registry.remove(tagger)
    data = buf.getvalue()
    out.append(f'fact: torch.load(gpu checkpoint) without map_location: {err(lambda: torch.load(io.BytesIO(data)))}')
    for ml in ('cpu', {'cuda:0': 'cpu'}, torch.device('cpu')):
        got = torch.load(io.BytesIO(data), map_location=ml)['model']
        out.append(f'fact: map_location={ml!r}: devices={sorted({str(v.device) for v in got.values()})} '
                   f'equal={all(torch.equal(got[k], msd[k]) for k in msd)}')
    seen = set()
    torch.load(io.BytesIO(data), map_location=lambda storage, loc: seen.add(loc) or storage)
    out.append(f'answer: torch.load puts every tensor back on the device its file names ({", ".join(sorted(seen))} '
               f'for a GPU run\'s checkpoint: without map_location every rank that loads it restores them to cuda:0, GPU 0\'s '
               f'memory (not measured here), and a machine without a GPU refuses, as above); map_location=\'cpu\' or {{\'cuda:0\': f\'cuda:{{local_rank}}\'}} '
               f'puts them where this rank wants them')
    return out


def train(rank, work, start, stop, resume, with_opt, rewrap_at=None):
    ws = dist.get_world_size()
    ds = TensorDataset(torch.randn(48, 4, generator=torch.Generator().manual_seed(1)),
                       torch.randn(48, 1, generator=torch.Generator().manual_seed(2)))
    sampler = DistributedSampler(ds, num_replicas=ws, rank=rank, shuffle=True, seed=3)
    loader = DataLoader(ds, batch_size=6, sampler=sampler)
    ddp = DDP(make_model())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    if resume:
        ck = torch.load(f'{work}/ckpt.pt', map_location='cpu')
        ddp.module.load_state_dict(ck['model'])
        if with_opt:
            opt.load_state_dict(ck['optimizer'])
        assert ck['epoch'] + 1 == start
    for epoch in range(start, stop):
        if epoch == rewrap_at:  # as a resume does: a new DDP, its first iteration in model order
            ddp = DDP(ddp.module)
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
    if stop < EPOCHS and rank == 0:
        torch.save({'model': ddp.module.state_dict(), 'optimizer': opt.state_dict(), 'epoch': stop - 1},
                   f'{work}/ckpt.pt')
    dist.barrier()  # the checkpoint is on disk before any rank goes on
    return ddp.module.state_dict()


def worker(rank, work, phase, ws):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{work}/init.{phase}{ws}', rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=5))
    work_ws = f'{work}/ws{ws}'
    if phase == 'first':  # the uninterrupted run (also re-wrapped at epoch 1), then the run that stops after epoch 1
        if ws == 2:
            facts = keys_and_map(work)  # on every rank: DDP's constructor is a collective
            if rank == 0:
                with open(f'{work}/facts.json', 'w') as f:
                    json.dump(facts, f)
        torch.save(train(rank, work_ws, 0, EPOCHS, False, True), f'{work_ws}/full.{rank}.pt')
        torch.save(train(rank, work_ws, 0, EPOCHS, False, True, rewrap_at=1), f'{work_ws}/rewrapped.{rank}.pt')
        train(rank, work_ws, 0, 1, False, True)
    else:  # fresh processes: resume from the checkpoint, with and without the optimizer state
        torch.save(train(rank, work_ws, 1, EPOCHS, True, True), f'{work_ws}/resumed.{rank}.pt')
        torch.save(train(rank, work_ws, 1, EPOCHS, True, False), f'{work_ws}/noopt.{rank}.pt')
    forked.leave(work, rank, ws, tag=f'{phase}{ws}')


def main():
    work, deadline = tempfile.mkdtemp(prefix='checkpoint_keys.'), time.monotonic() + 90
    try:
        for ws, phase in ((2, 'first'), (2, 'resume'), (3, 'first'), (3, 'resume')):  # fork: no torch op in the parent
            os.makedirs(f'{work}/ws{ws}', exist_ok=True)
            ctx = mp.start_processes(worker, args=(work, phase, ws), nprocs=ws, join=False, start_method='fork')
            while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
                if time.monotonic() > deadline:
                    for p in ctx.processes:
                        p.kill()
                    print('fact: FAILED (90 s deadline)')
                    return 1
        print('\n'.join(json.load(open(f'{work}/facts.json'))))
        same = lambda a, b: all(torch.equal(a[k], b[k]) for k in a)  # noqa: E731
        differ = lambda a, b: sum(int((a[k] != b[k]).sum()) for k in a if a[k].is_floating_point())  # noqa: E731
        results = {}

        def same_all(n, against, ws):
            return all(same(a, b) for a, b in zip(results[ws][n], results[ws][against]))

        for ws in (2, 3):
            sd = {n: [torch.load(f'{work}/ws{ws}/{n}.{r}.pt') for r in range(ws)]
                  for n in ('full', 'rewrapped', 'resumed', 'noopt')}
            for n in ('full', 'resumed'):
                print(f"fact: world_size {ws}, {n} run, rank 0 vs rank 1: params equal={same(*[{k: v for k, v in d.items() if 'running' not in k and 'num_b' not in k} for d in sd[n][:2]])}"
                      f", BatchNorm buffers equal={same(*[{k: v for k, v in d.items() if 'running' in k} for d in sd[n][:2]])}")
            for n, against in (('resumed', 'full'), ('noopt', 'full'), ('resumed', 'rewrapped')):
                what = {'resumed': 'resume with optimizer state', 'noopt': 'resume without optimizer state'}[n]
                print(f"fact: world_size {ws}: {what} == {'uninterrupted' if against == 'full' else 'uninterrupted with DDP(model) built again at epoch 1'} "
                      f"(torch.equal, all params and buffers, every rank): {all(same(a, b) for a, b in zip(sd[n], sd[against]))}"
                      f" ({sum(differ(a, b) for a, b in zip(sd[n], sd[against]))} values differ)")
            if ws == 3:
                print(f"answer: a run resumed from model, optimizer state and sampler epoch equals the uninterrupted "
                      f"run bit for bit at world_size 2 ({same_all('resumed', 'full', 2)}); at world_size 3 "
                      f"{sum(differ(a, b) for a, b in zip(sd['resumed'], sd['full']))} values end in other bits, "
                      f"because the new DDP all-reduces its first iteration in the model-order bucket layout "
                      f"(the uninterrupted run rebuilt it after its first iteration): the uninterrupted run that "
                      f"builds DDP(model) again at the same epoch equals the resumed one "
                      f"({all(same(a, b) for a, b in zip(sd['resumed'], sd['rewrapped']))})")
            results[ws] = sd
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    raise SystemExit(main())
