#!/usr/bin/python3
"""Three mistakes torch DDP runs without an error, measured in the torch that runs this script: a NaN in one rank's batch, model.module(x)
called instead of model(x), and a layer frozen before DDP() and unfrozen later.

Real torch DDP (CPU, gloo, --world-size ranks (2 or more, default 3) forked by torch.multiprocessing.start_processes, 10 s timeout per collective),
the cases one after the other on one process group, each with a fresh model, optimizer and generator. Model: nn.Sequential(Linear(6,16), ReLU, Linear(16,16), ReLU,
Linear(16,2)); 4 SGD steps (lr 0.1), each rank on its own batch of 8 (MSELoss). DDP is handed a Python
ProcessGroup that counts the floats each step all-reduces, then forwards them to gloo. After every step: the
non-finite values in each rank's .grad and parameters, and each layer's largest difference from rank 0.
Cases:
  nan          rank 1's batch at step 1 holds one NaN
  nan_guard    the same, and every rank skips the step when its (all-reduced) .grad is not finite
  module_call  every rank calls model.module(x), the wrapped module, instead of model(x)
  unfreeze     layer 0 has requires_grad=False when DDP(model) is built and True from step 1 (the optimizer
               holds every parameter from the start)
  rewrap       as unfreeze, and DDP(model) is built again after unfreezing
  module_call_fu, unfreeze_fu   module_call and unfreeze with DDP(model, find_unused_parameters=True)

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 sim/questions/silent_mistakes.py [--world-size 3]
"""
import datetime
import os
import shutil
import tempfile
import warnings

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import forked
from forwarding_pg import ForwardingPG

WORLD_SIZE, STEPS = 3, 4
CASES = ['nan', 'nan_guard', 'module_call', 'unfreeze', 'rewrap', 'module_call_fu', 'unfreeze_fu']
LAYERS = ['0', '2', '4']  # the Linear layers' names in the Sequential


class CountingPG(ForwardingPG):
    """Counts the floats all-reduced on it before the real (gloo) group runs them."""
    def __init__(self, pg):
        super().__init__(pg)
        self.floats = 0

    def seen(self, op, tensors):
        if op == 'ar':
            self.floats += sum(t.numel() for t in tensors if t.is_floating_point())


def nonfinite(tensors):
    return sum(int((~torch.isfinite(t)).sum()) for t in tensors if t is not None)


def train(rank, case):
    pg = CountingPG(dist.group.WORLD)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))
    unfreeze = case in ('unfreeze', 'rewrap', 'unfreeze_fu')
    if unfreeze:
        model[0].requires_grad_(False)
    ddp = DDP(model, process_group=pg, find_unused_parameters=case.endswith('_fu'))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    steps = []
    for step in range(STEPS):
        if step == 1 and unfreeze:
            model[0].requires_grad_(True)
            if case == 'rewrap':
                ddp = DDP(model, process_group=pg)
        x, y = torch.randn(8, 6, generator=g), torch.randn(8, 2, generator=g)
        if step == 1 and rank == 1 and case.startswith('nan'):
            x[3, 2] = float('nan')
        pg.floats = 0
        opt.zero_grad(set_to_none=True)
        out = (ddp.module if case.startswith('module_call') else ddp)(x)
        nn.functional.mse_loss(out, y).backward()
        grads = [p.grad for p in model.parameters()]
        skipped = case == 'nan_guard' and nonfinite(grads) > 0  # .grad is all-reduced: every rank decides alike
        if not skipped:
            opt.step()
        steps.append({'floats': pg.floats, 'grad_nonfinite': nonfinite(grads), 'skipped': skipped,
                      'param_nonfinite': nonfinite(model.parameters()),
                      'params': {n: model[int(n)].weight.detach().clone() for n in LAYERS}})
        dist.barrier()  # a case whose ranks issue nothing (module_call) still ends its step together
    return steps


def worker(rank, work):
    """Every case, one after the other, on one gloo group, each with a fresh model, optimizer and generator."""
    warnings.filterwarnings('ignore')
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{work}/init', rank=rank, world_size=WORLD_SIZE,
                            timeout=datetime.timedelta(seconds=10))
    torch.save({case: train(rank, case) for case in CASES}, f'{work}/out{rank}.pt')
    forked.leave(work, rank, WORLD_SIZE)


def run_all():
    work = tempfile.mkdtemp(prefix='silent_mistakes.')
    try:
        mp.start_processes(worker, args=(work,), nprocs=WORLD_SIZE, start_method='fork')
        outs = [torch.load(f'{work}/out{r}.pt') for r in range(WORLD_SIZE)]
        return {case: [outs[r][case] for r in range(WORLD_SIZE)] for case in CASES}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def layer_diffs(res, step):
    """Per layer: the largest |rank r - rank 0| of its weight over the ranks, after `step` (NaN counts as differing)."""
    out = {}
    for n in LAYERS:
        a = res[0][step]['params'][n]
        out[n] = max(float(torch.nan_to_num((res[r][step]['params'][n] - a).abs(), nan=float('inf')).max())
                     for r in range(1, WORLD_SIZE))
    return out


def main():
    global WORLD_SIZE
    WORLD_SIZE = forked.world_size_arg(WORLD_SIZE, 'these mistakes need')
    res = run_all()
    for case in CASES:
        for step in range(STEPS):
            per_rank = '; '.join(f"rank{r}: all-reduced {res[case][r][step]['floats']} floats, non-finite .grad "
                                 f"{res[case][r][step]['grad_nonfinite']}, parameters {res[case][r][step]['param_nonfinite']}"
                                 f"{', step skipped' if res[case][r][step]['skipped'] else ''}" for r in range(WORLD_SIZE))
            diffs = ' '.join(f'{n}:{d:g}' for n, d in layer_diffs(res[case], step).items())
            print(f'fact: {case} step {step}: {per_rank}; max |rank r - rank 0| per layer weight: {diffs}', flush=True)

    nan = res['nan']
    total = sum(p.numel() for p in nan[0][0]['params'].values()) + 16 + 16 + 2
    print(f"answer: a NaN in rank 1's batch at step 1 reaches every rank through the all-reduce: after that backward "
          f"{', '.join(str(nan[r][1]['grad_nonfinite']) for r in range(WORLD_SIZE))} of the {total} .grad values of "
          f"ranks {', '.join(str(r) for r in range(WORLD_SIZE))} are NaN, and after the step {nan[0][1]['param_nonfinite']} of rank 0's {total} parameters; "
          f"nothing raises, and every later step trains on NaN", flush=True)
    guard = res['nan_guard']
    print(f"answer: skipping the step when the all-reduced .grad is not finite (every rank sees the same .grad, so "
          f"all skip alike: skipped at step 1 on {sum(guard[r][1]['skipped'] for r in range(WORLD_SIZE))} of "
          f"{WORLD_SIZE} ranks) keeps every parameter finite ({guard[0][-1]['param_nonfinite']} non-finite after "
          f"step {STEPS - 1}) and the ranks equal (max difference {max(layer_diffs(guard, STEPS - 1).values()):g})",
          flush=True)
    mc = res['module_call']
    print(f"answer: model.module(x) instead of model(x): DDP's forward never runs, so its backward all-reduces "
          f"{mc[0][0]['floats']} floats (model(x): {nan[0][0]['floats']}); no error, and each rank steps on its own "
          f"gradient: after step 0 the ranks' weights differ by up to {max(layer_diffs(mc, 0).values()):.3g}, after "
          f"step {STEPS - 1} by up to {max(layer_diffs(mc, STEPS - 1).values()):.3g}", flush=True)
    uf, rw = res['unfreeze'], res['rewrap']
    d = layer_diffs(uf, STEPS - 1)
    model_floats = nan[0][0]['floats']
    print(f"answer: a layer frozen when DDP(model) is built is left out of DDP's buckets for good: unfrozen at step 1, "
          f"its gradient is computed on each rank and never all-reduced (every step all-reduces "
          f"{uf[0][STEPS - 1]['floats']} of {model_floats} floats), so after step {STEPS - 1} the ranks' layer 0 "
          f"weights differ by up to {d['0']:.3g} and the layers DDP reduces by up to {max(d['2'], d['4']):.3g}; "
          f"DDP(model) built again after unfreezing all-reduces {rw[0][STEPS - 1]['floats']} floats and keeps the "
          f"ranks equal (max difference {max(layer_diffs(rw, STEPS - 1).values()):g})", flush=True)
    mf, uff = res['module_call_fu'], res['unfreeze_fu']
    print(f"answer: find_unused_parameters=True changes neither: model.module(x) all-reduces {mf[0][0]['floats']} floats "
          f"(the ranks' weights differ by up to {max(layer_diffs(mf, STEPS - 1).values()):.3g} after step {STEPS - 1}), and "
          f"the layer unfrozen after DDP(model) is still never all-reduced (every step all-reduces "
          f"{uff[0][STEPS - 1]['floats']} of {model_floats} floats; its weights differ by up to "
          f"{layer_diffs(uff, STEPS - 1)['0']:.3g}, the other layers' by up to "
          f"{max(layer_diffs(uff, STEPS - 1)[n] for n in LAYERS[1:]):.3g}): DDP all-reduces only the parameters that "
          f"required gradients when DDP(model) was built, and only after a forward through DDP", flush=True)


if __name__ == '__main__':
    main()
