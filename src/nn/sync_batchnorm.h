// nn.SyncBatchNorm's arithmetic (torch/nn/modules/_functions.py's SyncBatchNorm, torch 1.13), without the
// communication: the caller all_gathers each rank's [mean, invstd, count] between stats and gather, and
// all_reduces [sum_dy, sum_dy_xmu] between backward_reduce and backward_elemt.
//
// torch runs these five ops on GPUs only. Each rank's own statistics and sums are its CPU BatchNorm kernel's
// (batchnorm.h), and the cross-rank merge and the elementwise steps follow the CUDA kernels' float
// expressions term by term (aten/src/ATen/native/cuda/Normalization.cuh: batch_norm_reduce_statistics_kernel,
// batch_norm_transform_input_kernel, batch_norm_backward_elemt_kernel). So the results equal torch's
// SyncBatchNorm function run with those ops on CPU bit for bit (sim/ddp_reference.py --sync-batchnorm) and
// a GPU's allclose: its per-channel sums run in a thread tree and nvcc fuses multiply-adds.
#pragma once

#include <cstdint>

namespace ddplab::nn {

// batch_norm_gather_stats_with_counts: the union batch's mean and invstd from every rank's
// [mean (C), invstd (C), count (1)] row of `gathered` ([world_size, 2C + 1], rank order), merged rank by
// rank as the kernel does (Chan's parallel variance in float); updates running_mean and running_var (the
// unbiased variance over all ranks' count) and returns the total count.
int64_t sync_batchnorm_gather_stats(const float* gathered, int world_size, int64_t C, float* running_mean,
                                    float* running_var, double momentum, double eps, float* mean, float* invstd);

// batch_norm_elemt: y = weight * (x - mean) * invstd + bias, per channel, on x [N, C, L].
void sync_batchnorm_elemt(const float* x, const float* weight, const float* bias, const float* mean,
                          const float* invstd, float* y, int64_t N, int64_t C, int64_t L);

// batch_norm_backward_reduce: this rank's sum_dy and sum_dy_xmu = sum(dy * (x - mean)) per channel (the
// CPU backward kernel's sums), grad_weight = sum_dy_xmu * invstd and grad_bias = sum_dy.
void sync_batchnorm_backward_reduce(const float* dy, const float* x, const float* mean, const float* invstd,
                                    float* sum_dy, float* sum_dy_xmu, float* grad_weight, float* grad_bias, int64_t N,
                                    int64_t C, int64_t L);

// batch_norm_backward_elemt with the all-reduced sums and the total count:
// dx = (dy - sum_dy / total - (x - mean) * invstd^2 * sum_dy_xmu / total) * weight * invstd.
void sync_batchnorm_backward_elemt(const float* dy, const float* x, const float* mean, const float* invstd,
                                   const float* weight, const float* sum_dy, const float* sum_dy_xmu, int64_t total,
                                   float* dx, int64_t N, int64_t C, int64_t L);

}  // namespace ddplab::nn
