#include "src/nn/batchnorm.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/tensor/aten_vec.h"

namespace ddplab::nn {
namespace {

// Normalization.cpp (batch_norm_cpu_update_stats_template with InvStd), built for plain x86-64: no FMA.
// var_sum / n and var_sum / (n - 1) divide in float; invstd is 1 / sqrt in double; running_mean is updated
// in float and running_var in double from the float unbiased variance.
void update_stats(const float* mean, const float* var_sum, float* running_mean, float* running_var, float* save_mean,
                  float* save_invstd, int64_t C, int64_t n, double momentum, double eps) {
  const float m = static_cast<float>(momentum);
  for (int64_t c = 0; c < C; ++c) {
    save_mean[c] = mean[c];
    const float var = var_sum[c] / static_cast<float>(n);
    save_invstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var) + eps));
    running_mean[c] = m * mean[c] + (1 - m) * running_mean[c];
    const double unbiased_var = var_sum[c] / static_cast<float>(n - 1);
    running_var[c] =
        static_cast<float>(static_cast<double>(m) * unbiased_var + static_cast<double>((1 - m) * running_var[c]));
  }
}

// batch_norm_cpu_collect_stats_contiguous_impl (L > 1): serial double sums per channel.
void collect_stats_contiguous(const float* x, float* mean, float* var_sum, int64_t N, int64_t C, int64_t L) {
  const int64_t count = N * L;
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < N; ++n) {
      const float* p = x + (n * C + c) * L;
      for (int64_t i = 0; i < L; ++i) sum += p[i];
    }
    const float m = static_cast<float>(sum / static_cast<double>(count));
    mean[c] = m;
    double vs = 0;
    for (int64_t n = 0; n < N; ++n) {
      const float* p = x + (n * C + c) * L;
      for (int64_t i = 0; i < L; ++i) {
        const float d = p[i] - m;
        vs += d * d;  // the float square, added in double
      }
    }
    var_sum[c] = static_cast<float>(vs);
  }
}

// batch_norm_cpu_collect_stats_channels_last_impl (L == 1, N > threads): rows added into a float buffer by
// 8-lane vectors, the buffer converted to double once (one thread's partial sum); the variance pass is
// y + (x - mean)^2, which torch's build fuses into one FMA.
void collect_stats_channels_last(const float* x, float* mean, float* var_sum, int64_t N, int64_t C) {
  std::vector<float> buf(static_cast<size_t>(C), 0.0f);
  for (int64_t i = 0; i < N; ++i) {
    const float* row = x + i * C;
    for (int64_t c = 0; c < C; ++c) buf[c] = row[c] + buf[c];
  }
  for (int64_t c = 0; c < C; ++c) mean[c] = static_cast<float>((0.0 + buf[c]) / static_cast<double>(N));
  std::fill(buf.begin(), buf.end(), 0.0f);
  for (int64_t i = 0; i < N; ++i) {
    const float* row = x + i * C;
    for (int64_t c = 0; c < C; ++c) {
      const float d = row[c] - mean[c];
      buf[c] = std::fma(d, d, buf[c]);
    }
  }
  for (int64_t c = 0; c < C; ++c) var_sum[c] = static_cast<float>(0.0 + buf[c]);
}

// batch_norm_cpu_collect_linear_and_constant_terms + the apply loop (cpu/batch_norm_kernel.cpp, AVX2 build):
// alpha = invstd * w, beta = b - mean * alpha and y = x * alpha + beta, each multiply-add fused by GCC.
void apply(const float* x, const float* weight, const float* bias, const float* mean, const float* invstd, float* y,
           int64_t N, int64_t C, int64_t L) {
  std::vector<float> alpha(static_cast<size_t>(C)), beta(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    alpha[c] = invstd[c] * weight[c];
    beta[c] = std::fma(-mean[c], alpha[c], bias[c]);
  }
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      const float* p = x + (n * C + c) * L;
      float* q = y + (n * C + c) * L;
      for (int64_t i = 0; i < L; ++i) q[i] = std::fma(p[i], alpha[c], beta[c]);
    }
  }
}

// vec::map2_reduce_all((x - mean) * dy, +) over one plane; the add of the product is fused (FMA).
float centered_dot(const float* x, const float* dy, float mean, int64_t size) {
  const vec::V vm = vec::broadcast(mean);
  auto prod = [vm](vec::V a, vec::V b) { return _mm256_mul_ps(_mm256_sub_ps(a, vm), b); };
  if (size < vec::kSize) return vec::reduce_lanes(vec::Add(), prod(vec::loadu(x, size), vec::loadu(dy, size)), size);
  vec::V acc = prod(vec::loadu(x), vec::loadu(dy));
  int64_t d = vec::kSize;
  for (; d < size - (size % vec::kSize); d += vec::kSize) {
    acc = _mm256_fmadd_ps(_mm256_sub_ps(vec::loadu(x + d), vm), vec::loadu(dy + d), acc);
  }
  if (size - d > 0) {
    const int64_t r = size - d;
    acc = vec::set(acc, _mm256_fmadd_ps(_mm256_sub_ps(vec::loadu(x + d, r), vm), vec::loadu(dy + d, r), acc), r);
  }
  return vec::reduce_tree(vec::Add(), acc);
}

// batch_norm_cpu_backward_contiguous_impl, train (L > 1).
void backward_contiguous(const float* dy, const float* x, const float* weight, const float* mean_, const float* invstd_,
                         float* dx, float* dw, float* db, int64_t N, int64_t C, int64_t L) {
  const int64_t count = N * L;
  for (int64_t c = 0; c < C; ++c) {
    const float w = weight[c], mean = mean_[c], invstd = invstd_[c];
    double sum = 0, dotp = 0;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t off = (n * C + c) * L;
      sum += vec::reduce_all(vec::Add(), dy + off, L);
      dotp += centered_dot(x + off, dy + off, mean, L);
    }
    const float k = static_cast<float>(dotp) * invstd * invstd / static_cast<float>(count);
    const float grad_mean = static_cast<float>(sum / static_cast<double>(count));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t off = (n * C + c) * L;
      for (int64_t i = 0; i < L; ++i) {
        // (dy - grad_mean - (x - mean) * k) * invstd * w, the inner multiply-subtract fused.
        const float v = std::fma(-(x[off + i] - mean), k, dy[off + i] - grad_mean);
        dx[off + i] = v * invstd * w;
      }
    }
    dw[c] = static_cast<float>(dotp * static_cast<double>(invstd));
    db[c] = static_cast<float>(sum);
  }
}

// batch_norm_cpu_backward_channels_last_impl, train (L == 1): float buffers over the rows, then one double
// conversion; k and grad_mean per channel by vector arithmetic.
void backward_channels_last(const float* dy, const float* x, const float* weight, const float* mean,
                            const float* invstd, float* dx, float* dw, float* db, int64_t N, int64_t C) {
  std::vector<float> sum(static_cast<size_t>(C), 0.0f), dotp(static_cast<size_t>(C), 0.0f);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t c = 0; c < C; ++c) {
      sum[c] = sum[c] + dy[i * C + c];
      dotp[c] = std::fma(x[i * C + c] - mean[c], dy[i * C + c], dotp[c]);
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    sum[c] = static_cast<float>(0.0 + sum[c]);
    dotp[c] = static_cast<float>(0.0 + dotp[c]);
  }
  const float n = static_cast<float>(N);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t c = 0; c < C; ++c) {
      const float k = dotp[c] * invstd[c] * invstd[c] / n;
      const float grad_mean = sum[c] / n;
      const float v = std::fma(-(x[i * C + c] - mean[c]), k, dy[i * C + c] - grad_mean);
      dx[i * C + c] = v * invstd[c] * weight[c];
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    dw[c] = dotp[c] * invstd[c];
    db[c] = sum[c];
  }
}

// torch picks the kernel by L (its image_size): L == 1 is its channels-last one.
void collect_stats(const float* x, float* mean, float* var_sum, int64_t N, int64_t C, int64_t L) {
  if (L == 1) {
    collect_stats_channels_last(x, mean, var_sum, N, C);
  } else {
    collect_stats_contiguous(x, mean, var_sum, N, C, L);
  }
}

}  // namespace

void batchnorm_stats(const float* x, float* mean, float* invstd, int64_t N, int64_t C, int64_t L, double eps) {
  std::vector<float> var_sum(static_cast<size_t>(C));
  collect_stats(x, mean, var_sum.data(), N, C, L);
  for (int64_t c = 0; c < C; ++c) {  // as update_stats computes save_invstd
    const float var = var_sum[c] / static_cast<float>(N * L);
    invstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var) + eps));
  }
}

void batchnorm_forward_train(const float* x, const float* weight, const float* bias, float* running_mean,
                             float* running_var, float* y, float* save_mean, float* save_invstd, int64_t N, int64_t C,
                             int64_t L, double momentum, double eps) {
  if (N * L < 2) {
    throw std::invalid_argument("batchnorm: training needs more than 1 value per channel, got N * L = " +
                                std::to_string(N * L));
  }
  std::vector<float> mean(static_cast<size_t>(C)), var_sum(static_cast<size_t>(C));
  collect_stats(x, mean.data(), var_sum.data(), N, C, L);
  update_stats(mean.data(), var_sum.data(), running_mean, running_var, save_mean, save_invstd, C, N * L, momentum, eps);
  apply(x, weight, bias, save_mean, save_invstd, y, N, C, L);
}

void batchnorm_forward_eval(const float* x, const float* weight, const float* bias, const float* running_mean,
                            const float* running_var, float* y, int64_t N, int64_t C, int64_t L, double eps) {
  // collect_linear_and_constant_terms in eval: invstd = 1 / sqrt(running_var + eps) in float.
  std::vector<float> invstd(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) invstd[c] = 1 / std::sqrt(running_var[c] + static_cast<float>(eps));
  apply(x, weight, bias, running_mean, invstd.data(), y, N, C, L);
}

void batchnorm_backward_train(const float* grad_y, const float* x, const float* weight, const float* save_mean,
                              const float* save_invstd, float* grad_x, float* grad_weight, float* grad_bias, int64_t N,
                              int64_t C, int64_t L) {
  if (L == 1) {
    backward_channels_last(grad_y, x, weight, save_mean, save_invstd, grad_x, grad_weight, grad_bias, N, C);
  } else {
    backward_contiguous(grad_y, x, weight, save_mean, save_invstd, grad_x, grad_weight, grad_bias, N, C, L);
  }
}

}  // namespace ddplab::nn
