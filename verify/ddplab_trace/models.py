"""What DDPTrace is given, seen through the frameworks that wrap it: DDP, FSDP2, composable replicate(),
Fabric, accelerate, Lightning, torch.compile."""


import torch

from .common import _Unrecordable


# ---------------------------------------------------------------------------------------------------------
# What DDPTrace is given: DistributedDataParallel itself, or what frameworks wrap it in. Seen through: Fabric's
# _FabricModule (its _forward_module), torch.compile's OptimizedModule (_orig_mod), torch 2.x's composable
# replicate() (a DDP over the module's parameters, built at the first forward); and optimizer wrappers (Fabric's
# _FabricOptimizer, accelerate's AcceleratedOptimizer, Lightning's LightningOptimizer: .optimizer or ._optimizer),
# whose step() calls the torch optimizer's only when it really steps (accelerate's skipped steps under accumulate,
# GradScaler's on inf), so that only real steps are recorded.
# ---------------------------------------------------------------------------------------------------------
class _Replicated:
    """replicate(module) as the recorder reads a DDP model: .module is the learner's module (its names), the rest
    the DistributedDataParallel inside, built now if the first forward has not built it yet (its constructor's
    broadcast: every rank makes DDPTrace at the same point of its script, as it would call DDP())."""

    def __init__(self, module, state):
        if not state.has_initialized:
            state.lazy_init()
        ddp = state._ddp
        if [id(p) for p in ddp.module.parameters()] != [id(p) for p in module.parameters() if p.requires_grad]:
            raise _Unrecordable("replicate() over other parameters than the module's (ignored_modules, or parameters "
                                "managed by fully_shard) is not recorded")
        self.module = module
        self._ddp = ddp

    def __getattr__(self, name):  # reducer, require_backward_grad_sync, _comm_hooks, ...: the DDP inside
        return getattr(self.__dict__["_ddp"], name)

    def register_forward_pre_hook(self, *args, **kwargs):  # the learner calls the module, not the DDP inside
        return self.module.register_forward_pre_hook(*args, **kwargs)


def _fsdp_module_class():
    for where in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            mod = __import__(where, fromlist=["FSDPModule"])
            return getattr(mod, "FSDPModule")
        except Exception:
            continue
    return None


def _fsdp_param_groups(module):
    """An FSDP2 module's parameter groups (torch 2.15 keeps a list; earlier 2.x one group or None)."""
    state = module._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is None:
        group = getattr(state, "_fsdp_param_group", None)
        groups = [group] if group is not None else []
    return list(groups)


class _Sharded:
    """fully_shard(model) (FSDP2, torch 2.x) as the recorder reads it: .module is the learner's root module, whose
    parameters are the sharded DTensors the optimizer steps; .groups are FSDP's parameter groups, one reduce-scatter
    each per synchronised backward (docs/trace_format.md, "fsdp")."""

    def __init__(self, module, fsdp_class):
        self.module = module
        self.groups = []  # (module name, module, FSDPParamGroup)
        for name, sub in module.named_modules():
            if isinstance(sub, fsdp_class):
                for group in _fsdp_param_groups(sub):
                    self.groups.append((name, sub, group))

    @property
    def require_backward_grad_sync(self):
        """set_requires_gradient_sync(): whether the next backward reduce-scatters (all groups alike)."""
        flags = {bool(getattr(g, "reduce_grads", True)) for _, _, g in self.groups}
        if len(flags) > 1:
            raise _Unrecordable("set_requires_gradient_sync differs between this model's FSDP modules, which ddp_check "
                                "does not model")
        return flags.pop() if flags else True

    def register_forward_pre_hook(self, *args, **kwargs):
        return self.module.register_forward_pre_hook(*args, **kwargs)


class _Hand:
    """A model whose data parallelism the script writes itself (no DistributedDataParallel: its own all-reduces,
    in a wrapper of its own or around the bare model), as the recorder reads a DDP model: .module is the model,
    and the options are DDP's defaults, which ddp_check replays beside the script's own sync ("vs_ddp")."""

    require_backward_grad_sync = True
    bucket_bytes_cap = 25 * 1024 * 1024
    broadcast_buffers = True
    find_unused_parameters = False
    gradient_as_bucket_view = False
    static_graph = False

    def __init__(self, module):
        self.module = module

    def register_forward_pre_hook(self, *args, **kwargs):
        return self.module.register_forward_pre_hook(*args, **kwargs)


def _replicate_state(m):
    try:
        from torch.distributed._composable import replicate
        st = replicate.state(m)
    except Exception:
        return None
    return st if st is not None and hasattr(st, "lazy_init") else None


def _what_model(m):
    """(model, None) for a model the recorder records, else (None, why: one line)."""
    seen = m
    for _ in range(8):
        if hasattr(m, "module") and hasattr(m, "reducer"):
            return m, None
        inner = getattr(m, "_forward_module", None)  # Fabric's _FabricModule
        if inner is None:
            inner = getattr(m, "_orig_mod", None)  # torch.compile
        if inner is None or inner is m:
            break
        m = inner
    st = _replicate_state(m)
    if st is not None:
        return _Replicated(m, st), None
    names = {type(x).__name__ for x in m.modules()} if hasattr(m, "modules") else set()
    if "FullyShardedDataParallel" in names:
        return None, ("%s is sharded by FullyShardedDataParallel (FSDP1), which ddp_check does not check (fully_shard, "
                      "FSDP2, it does): nothing recorded" % type(seen).__name__)
    fsdp_class = _fsdp_module_class()
    if fsdp_class is not None and hasattr(m, "modules") and any(isinstance(x, fsdp_class) for x in m.modules()):
        if not isinstance(m, fsdp_class):
            return None, ("%s has fully_shard on some of its modules but not on itself, and the recorder needs it on "
                          "the model it is given too (fully_shard(model) after its layers): nothing recorded"
                          % type(seen).__name__)
        return _Sharded(m, fsdp_class), None
    if not isinstance(m, torch.nn.Module):
        return None, ("the model given is a %s, not a torch.nn.Module: nothing recorded" % type(seen).__name__)
    if any(hasattr(x, "reducer") and hasattr(x, "module") for x in m.modules()):
        return None, ("%s holds a DistributedDataParallel inside it: give DDPTrace that DistributedDataParallel "
                      "itself: nothing recorded" % type(seen).__name__)
    return _Hand(m), None  # data parallelism written by hand: the script's own collectives are recorded


def _framework(model, optimizer):
    """The training framework whose wrappers the script passed ("fabric", "accelerate"), or None: its advice is
    given in its own words."""
    for obj in (model, optimizer):
        mod = type(obj).__module__ or ""
        if mod.startswith(("lightning.fabric", "lightning_fabric")):
            return "fabric"
        if mod.startswith("accelerate"):
            return "accelerate"
    return None


def _wrapped_optimizer(opt):
    """The torch.optim optimizer opt wraps as .optimizer or ._optimizer (Fabric's, accelerate's, Lightning's), or
    None."""
    for attr in ("optimizer", "_optimizer"):
        inner = getattr(opt, attr, None)
        if isinstance(inner, torch.optim.Optimizer) and inner is not opt:
            return inner
    return None


def _torch_optimizer(opt):
    """The torch.optim optimizer inside Fabric's, accelerate's or Lightning's wrapper (or opt itself)."""
    for _ in range(8):  # Fabric's wrapper is also an instance of the optimizer's class (FabricSGD): look inside first
        inner = _wrapped_optimizer(opt)
        if inner is None:
            return opt
        opt = inner
    return opt


def _param_ids(opt):
    return {id(p) for g in getattr(opt, "param_groups", None) or [] for p in g.get("params", [])}


def _shard_of(opt, model):
    """ZeRO-1 (an optimizer sharded by hand, or torch's ZeroRedundancyOptimizer): (holder, attribute, inner), where
    holder is opt or an optimizer it wraps, and holder.<attribute> is a torch.optim optimizer that steps only some
    of the parameters (this rank's share; the rest are stepped by their owners and broadcast). None otherwise;
    never raises."""
    try:
        everything = {id(p) for p in model.parameters() if p.requires_grad}
        for _ in range(8):
            own = _param_ids(opt) or everything  # a holder that is not a torch.optim optimizer has no groups
            found = [(attr, v) for attr, v in vars(opt).items()
                     if isinstance(v, torch.optim.Optimizer) and v is not opt]
            if len(found) == 1:
                attr, inner = found[0]
                mine = _param_ids(inner)
                if mine < own and mine <= everything:
                    return opt, attr, inner
            inner = _wrapped_optimizer(opt)
            if inner is None:
                return None
            opt = inner
    except Exception:
        pass
    return None

def _sparse_grad_params(module):
    """ids of the parameters whose gradient is sparse: Embedding/EmbeddingBag(sparse=True)'s weights."""
    ids = set()
    for m in module.modules():
        if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and getattr(m, "sparse", False):
            ids.add(id(m.weight))
    return ids
