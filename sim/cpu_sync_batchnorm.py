"""nn.SyncBatchNorm on CPU, for sim/ddp_reference.py --sync-batchnorm true (the oracle of ddp_sim's).

torch 1.13 and 2.x run SyncBatchNorm on GPUs only: DDP refuses a model holding one on CPU, and the five ATen
ops its autograd function calls (batch_norm_stats, batch_norm_gather_stats_with_counts, batch_norm_elemt,
batch_norm_backward_reduce, batch_norm_backward_elemt) have no CPU kernel. Here:
  - CpuSyncBatchNorm is SyncBatchNorm.forward without its GPU check (a _BatchNorm, so that DDP accepts it), and
    it calls torch's own autograd function, torch.nn.modules._functions.SyncBatchNorm: torch's all_gather of
    [mean, invstd, count] and all_reduce of [sum_dy, sum_dy_xmu] over gloo, in torch's order;
  - the five ops are given CPU bodies: each rank's statistics and sums are torch's CPU BatchNorm kernels'
    (native_batch_norm and native_batch_norm_backward), and the cross-rank merge and the elementwise steps
    are the CUDA kernels' float expressions term by term (aten/src/ATen/native/cuda/Normalization.cuh).
A GPU's SyncBatchNorm is allclose to this, not equal: its per-channel sums run in a thread tree and nvcc
fuses multiply-adds.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules._functions import SyncBatchNorm as sync_batch_norm


def _f(v):
    return torch.tensor(v, dtype=torch.float32)


def _c(t, x):  # a per-channel [C] tensor shaped to broadcast over x [N, C, ...]
    return t.view(1, -1, *([1] * (x.dim() - 2)))


def batch_norm_stats(x, eps):
    _, mean, invstd = torch.native_batch_norm(x, None, None, None, None, True, 0.0, eps)
    return mean, invstd


def batch_norm_gather_stats_with_counts(x, mean_all, invstd_all, running_mean, running_var, momentum, eps, counts):
    epsilon, m = _f(eps), _f(momentum)
    avg, var_n, n = torch.zeros(mean_all.shape[1]), torch.zeros(mean_all.shape[1]), 0
    for j in range(mean_all.shape[0]):  # batch_norm_reduce_statistics_kernel, rank by rank
        count, mj, nf = counts[j], mean_all[j], _f(float(n))
        v = 1.0 / invstd_all[j]
        v = (v * v - epsilon) * count
        factor = _f(1.0 / float(nf + count))  # 1.0 / (n + count): a double division, stored as float
        var_n = var_n + (v + (avg - mj) * (avg - mj) * nf * count * factor)
        avg = nf * factor * avg + count * factor * mj
        n = int(nf + count)
    invstd = 1.0 / torch.sqrt(var_n / _f(float(n)) + epsilon)
    with torch.no_grad():
        running_mean.copy_((1 - m) * running_mean + m * avg)
        running_var.copy_((1 - m) * running_var + m * (var_n / _f(float(n - 1))))
    return avg, invstd


def batch_norm_elemt(x, weight, bias, mean, invstd, eps):
    return _c(weight, x) * (x - _c(mean, x)) * _c(invstd, x) + _c(bias, x)


def batch_norm_backward_reduce(dy, x, mean, invstd, weight, input_g, weight_g, bias_g):
    ones = torch.ones_like(mean)  # the CPU backward with invstd 1: grad_weight = sum(dy * (x - mean)), grad_bias = sum(dy)
    _, sum_dy_xmu, sum_dy = torch.ops.aten.native_batch_norm_backward(dy, x, ones, None, None, mean, ones, True, 1e-5,
                                                                       [True, True, True])
    return sum_dy, sum_dy_xmu, (sum_dy_xmu * invstd if weight_g else None), (sum_dy.clone() if bias_g else None)


def batch_norm_backward_elemt(dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    norm_fct = _f(1.0) / _f(float(int(count.sum())))
    m_dy, f2, f1 = sum_dy * norm_fct, weight * invstd, invstd * invstd * sum_dy_xmu * norm_fct
    return (dy - _c(m_dy, x) - (x - _c(mean, x)) * _c(f1, x)) * _c(f2, x)


def install_cpu_ops():
    """Gives torch.batch_norm_stats & co. the CPU bodies above (torch's SyncBatchNorm function looks them up
    on `torch` at each call), and answers its CUDA-graph question."""
    for fn in (batch_norm_stats, batch_norm_gather_stats_with_counts, batch_norm_elemt, batch_norm_backward_reduce,
               batch_norm_backward_elemt):
        setattr(torch, fn.__name__, fn)
    torch.cuda.is_current_stream_capturing = lambda: False  # a CPU build has no CUDA graphs to ask


class CpuSyncBatchNorm(nn.modules.batchnorm._BatchNorm):
    """nn.SyncBatchNorm.forward (torch 1.13) without `if not input.is_cuda: raise`."""

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f'expected at least 2D input (got {input.dim()}D input)')

    def forward(self, input):
        self._check_input_dim(input)
        eaf = self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
        world_size = dist.get_world_size()
        if not (self.training and world_size > 1):  # SyncBatchNorm's fallback: plain batch_norm
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias, self.training,
                                eaf, self.eps)
        return sync_batch_norm.apply(input, self.weight, self.bias, self.running_mean, self.running_var, self.eps,
                                     eaf, dist.group.WORLD, world_size)


def convert(module):
    """nn.SyncBatchNorm.convert_sync_batchnorm(module), to CpuSyncBatchNorm: same parameters and buffers."""
    for name, child in module.named_children():
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            new = CpuSyncBatchNorm(child.num_features, child.eps, child.momentum, child.affine,
                                   child.track_running_stats)
            with torch.no_grad():
                new.weight.copy_(child.weight)
                new.bias.copy_(child.bias)
            new.running_mean, new.running_var = child.running_mean, child.running_var
            new.num_batches_tracked = child.num_batches_tracked
            setattr(module, name, new)
        else:
            convert(child)
    return module
