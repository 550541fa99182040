// nn.BatchNorm1d / nn.BatchNorm2d on contiguous float32, bit for bit with torch 1.13's CPU kernels at one
// thread (aten/src/ATen/native/Normalization.cpp and cpu/batch_norm_kernel.cpp).
//
// Shapes: x is [N, C, L] row-major. BatchNorm2d on NCHW has L = H * W; BatchNorm1d on (N, C) has L = 1 and
// on (N, C, L) its length. torch runs two kernels, chosen by L (its image_size):
//   L > 1   per channel: double sums over the plane, two passes (mean, then sum of float (x - mean)^2);
//   L == 1  torch's channels-last kernel ("NC11 is also channels last"): rows added into float buffers,
//           then one double conversion per channel.
// Parameters: weight (gamma) and bias (beta) of C floats, at init ones and zeros; running_mean 0 and
// running_var 1 (buffers). num_batches_tracked += 1 per training forward is the caller's.
#pragma once

#include <cstdint>

namespace ddplab::nn {

inline constexpr double kBatchNormEps = 1e-5;
inline constexpr double kBatchNormMomentum = 0.1;

// Training forward: normalises with the batch statistics, writes y ([N, C, L]) and save_mean / save_invstd
// ([C], for the backward), and updates running_mean / running_var in place (momentum, unbiased variance).
// N * L must be at least 2 (torch: "Expected more than 1 value per channel when training").
void batchnorm_forward_train(const float* x, const float* weight, const float* bias, float* running_mean,
                             float* running_var, float* y, float* save_mean, float* save_invstd, int64_t N, int64_t C,
                             int64_t L, double momentum = kBatchNormMomentum, double eps = kBatchNormEps);

// The training forward's statistics alone (batch_norm_stats on one rank, SyncBatchNorm's first step):
// save_mean and save_invstd (1 / sqrt(biased var + eps)) as batchnorm_forward_train computes them.
void batchnorm_stats(const float* x, float* mean, float* invstd, int64_t N, int64_t C, int64_t L,
                     double eps = kBatchNormEps);

// Eval forward: normalises with running_mean / running_var; nothing is updated.
void batchnorm_forward_eval(const float* x, const float* weight, const float* bias, const float* running_mean,
                            const float* running_var, float* y, int64_t N, int64_t C, int64_t L,
                            double eps = kBatchNormEps);

// Training backward (native_batch_norm_backward with train=true): writes grad_x ([N, C, L]),
// grad_weight and grad_bias ([C]); they are overwritten, not accumulated (the caller adds them to .grad).
void batchnorm_backward_train(const float* grad_y, const float* x, const float* weight, const float* save_mean,
                              const float* save_invstd, float* grad_x, float* grad_weight, float* grad_bias, int64_t N,
                              int64_t C, int64_t L);

}  // namespace ddplab::nn
