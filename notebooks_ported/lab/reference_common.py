"""What the notebook labs' reference.py scripts share: one process per rank, each leaving its results as
JSON, and the --dump FILE that gathers them. A reference.py imports it with its folder on sys.path:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lab'))
    import reference_common
"""
import json
import os
import tempfile

import torch.distributed as dist
import torch.multiprocessing as mp


def f32(t):
    """A tensor as a flat list of Python floats, each float32 to the 9 digits that identify it."""
    return [float('%.9g' % v) for v in t.detach().flatten().tolist()]


def finish_rank(rank, out_dir, doc):
    """The end of a rank's worker: writes `doc` as out_dir/rank{rank}.json and leaves the process group once
    every rank has finished its collectives (the barrier: a rank that tears down its Gloo pairs while a peer is
    still in the last broadcast makes torch 1.13 abort that peer, "terminate called without an active
    exception", as notebooks_test saw in CI once)."""
    with open(os.path.join(out_dir, f'rank{rank}.json'), 'w') as f:
        json.dump(doc, f)
    dist.barrier()
    dist.destroy_process_group()


def spawn_ranks(worker, world_size, args, dump):
    """Runs worker(rank, *args, init_file, out_dir) in world_size processes (init_file: the file rendezvous,
    out_dir: where each rank calls finish_rank). With `dump`, writes {'world_size', 'ranks': each rank's
    JSON} to it atomically."""
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=tuple(args) + (os.path.join(d, 'init'), d), nprocs=world_size, join=True)
        ranks = [json.load(open(os.path.join(d, f'rank{r}.json'))) for r in range(world_size)]
    if dump:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(dump)))
        with os.fdopen(fd, 'w') as f:
            json.dump({'world_size': world_size, 'ranks': ranks}, f)
        os.replace(tmp, dump)
