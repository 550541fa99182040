"""--comm-hook for the PyTorch oracles (sim/ddp_reference.py, sim/gpt_reference.py): DDP.register_comm_hook with
torch's own hooks (torch.distributed.algorithms.ddp_comm_hooks), before the first forward."""


def add_comm_hook_flags(add):
    add('--comm-hook', choices=['none', 'allreduce', 'fp16-compress', 'bf16-compress', 'powersgd', 'noop'],
        default='none')
    add('--powersgd-rank', type=int, default=1)
    add('--powersgd-start-iter', type=int, default=2)


def register_comm_hook(ddp, a):
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks, powerSGD_hook
    if a.comm_hook == 'powersgd':
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=a.powersgd_rank,
                                            start_powerSGD_iter=a.powersgd_start_iter)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return
    hooks = {'allreduce': default_hooks.allreduce_hook, 'fp16-compress': default_hooks.fp16_compress_hook,
             'bf16-compress': default_hooks.bf16_compress_hook, 'noop': debugging_hooks.noop_hook}
    if a.comm_hook in hooks:
        ddp.register_comm_hook(None, hooks[a.comm_hook])
