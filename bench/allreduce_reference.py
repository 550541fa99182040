#!/usr/bin/python3
"""torch.distributed all-reduce (gloo backend, 2 processes, CPU) of 4 KiB .. 64 MiB float32, timed the way
//bench:allreduce times its own: barrier, then one all_reduce, averaged over max(5, 256 MiB / size)
rounds after two warm-ups. Prints `bytes B us T` per size (rank 0)."""
import datetime
import os
import tempfile
import time

os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')  # one BLAS thread: threaded OpenBLAS adds in another order
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, init_file):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method='file://' + init_file, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    size = 4 << 10
    while size <= 64 << 20:
        n = size // 4
        iters = min(200, max(5, (256 << 20) // size))
        t = torch.empty(n)
        total = 0.0
        for it in range(-2, iters):
            t.fill_(1.0)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            if it >= 0:
                total += time.perf_counter() - t0
        if rank == 0:
            print(f'bytes {size} us {total / iters * 1e6:.3f}', flush=True)
        size *= 4
    dist.destroy_process_group()


if __name__ == '__main__':
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(os.path.join(d, 'init'),), nprocs=2, join=True)
