#include "src/nn/sync_batchnorm.h"

#include <cmath>
#include <vector>

#include "src/nn/batchnorm.h"

namespace ddplab::nn {

int64_t sync_batchnorm_gather_stats(const float* gathered, int world_size, int64_t C, float* running_mean,
                                    float* running_var, double momentum, double eps, float* mean, float* invstd) {
  const float epsilon = static_cast<float>(eps), m = static_cast<float>(momentum);
  const int64_t row = 2 * C + 1;
  int64_t total = 0;
  for (int64_t c = 0; c < C; ++c) {
    float avg = 0, var_n = 0;
    int64_t n = 0;  // index_t in the kernel
    for (int j = 0; j < world_size; ++j) {
      const float* r = gathered + j * row;
      const float count = r[2 * C];
      const float mj = r[c];
      float v = 1.0f / r[C + c];
      v = (v * v - epsilon) * count;
      const float factor = static_cast<float>(1.0 / static_cast<double>(static_cast<float>(n) + count));
      const float nf = static_cast<float>(n);
      var_n += v + (avg - mj) * (avg - mj) * nf * count * factor;
      avg = nf * factor * avg + count * factor * mj;
      n = static_cast<int64_t>(nf + count);
    }
    mean[c] = avg;
    invstd[c] = 1.0f / std::sqrt(var_n / static_cast<float>(n) + epsilon);
    running_mean[c] = (1 - m) * running_mean[c] + m * avg;
    const float unbiased = var_n / static_cast<float>(n - 1);
    running_var[c] = (1 - m) * running_var[c] + m * unbiased;
    total = n;
  }
  return total;
}

void sync_batchnorm_elemt(const float* x, const float* weight, const float* bias, const float* mean,
                          const float* invstd, float* y, int64_t N, int64_t C, int64_t L) {
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t c = 0; c < C; ++c) {
      const float* p = x + (i * C + c) * L;
      float* q = y + (i * C + c) * L;
      for (int64_t k = 0; k < L; ++k) q[k] = weight[c] * (p[k] - mean[c]) * invstd[c] + bias[c];
    }
  }
}

void sync_batchnorm_backward_reduce(const float* dy, const float* x, const float* mean, const float* invstd,
                                    float* sum_dy, float* sum_dy_xmu, float* grad_weight, float* grad_bias, int64_t N,
                                    int64_t C, int64_t L) {
  // The CPU backward with invstd 1 hands back exactly its two sums: grad_weight = sum(dy * (x - mean)) * 1
  // and grad_bias = sum(dy). Its grad_input is not used.
  const std::vector<float> ones(static_cast<size_t>(C), 1.0f);
  std::vector<float> scratch(static_cast<size_t>(N * C * L));
  batchnorm_backward_train(dy, x, ones.data(), mean, ones.data(), scratch.data(), sum_dy_xmu, sum_dy, N, C, L);
  for (int64_t c = 0; c < C; ++c) {
    grad_weight[c] = sum_dy_xmu[c] * invstd[c];
    grad_bias[c] = sum_dy[c];
  }
}

void sync_batchnorm_backward_elemt(const float* dy, const float* x, const float* mean, const float* invstd,
                                   const float* weight, const float* sum_dy, const float* sum_dy_xmu, int64_t total,
                                   float* dx, int64_t N, int64_t C, int64_t L) {
  const float norm_fct = 1.0f / static_cast<float>(total);
  for (int64_t c = 0; c < C; ++c) {
    const float m_dy = sum_dy[c] * norm_fct;
    const float f2 = weight[c] * invstd[c];
    const float f1 = invstd[c] * invstd[c] * sum_dy_xmu[c] * norm_fct;
    for (int64_t i = 0; i < N; ++i) {
      const int64_t off = (i * C + c) * L;
      for (int64_t k = 0; k < L; ++k) dx[off + k] = (dy[off + k] - m_dy - (x[off + k] - mean[c]) * f1) * f2;
    }
  }
}

}  // namespace ddplab::nn
