"""The recorder installed with pip, as a learner installs it: a 2-rank Gloo DDP run traced with the documented
lines and no sys.path line, the package imported from where pip put it (printed, for the test to check).

    python3 tests/ddp_check/pip_installed.py RUN_DIR        # with PYTHONPATH holding only pip's target
"""
import datetime
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from ddplab_trace import DDPTrace


def train(rank, run_dir, init):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    with DDPTrace(model, opt, run_dir):
        for _ in range(3):
            x, y = torch.randn(8, 6, generator=g), torch.randn(8, 2, generator=g)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    import ddplab_trace
    print("ddplab_trace from", os.path.dirname(os.path.dirname(os.path.abspath(ddplab_trace.__file__))))
    from ddplab_trace import fast  # _fast.c installed beside it (package data), compiled at its first use
    print("_fast.c compiled:", fast._library() is not None)
    sys.stdout.flush()
    init = os.path.join(tempfile.mkdtemp(), "init")
    mp.start_processes(train, args=(sys.argv[1], init), nprocs=2, start_method="fork")
