"""A Python ProcessGroup that shows the script each collective DDP issues on it, then hands it to a real group
(gloo): how the questions' scripts log, count and measure what DDP sends (torch 1.13 and 2.x). DDP is given it
as process_group=...; its C++ reducer calls these methods like any group's.
"""
import torch.distributed as dist


class ForwardingPG(dist.ProcessGroup):
    def __init__(self, pg):
        super().__init__(pg.rank(), pg.size())
        self.pg = pg

    def seen(self, op, tensors):
        """Called before each all-reduce and broadcast is forwarded: op is 'ar' or 'bc'. Nothing here."""

    def allreduce(self, tensors, opts):
        self.seen('ar', tensors)
        return self.pg.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        self.seen('bc', tensors)
        return self.pg.broadcast(tensors, opts)

    def allgather(self, outs, ins, opts):
        return self.pg.allgather(outs, ins, opts)  # DDP's constructor only

    def getBackendName(self):
        return 'forwarding-' + self.pg.getBackendName() if hasattr(self.pg, 'getBackendName') else 'forwarding'
