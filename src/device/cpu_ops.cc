#include "src/device/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ddplab::device {

float* CpuOps::alloc(size_t n) {
  const size_t size = std::max<size_t>(n, 1);
  blocks_.push_back(std::make_unique<float[]>(size));
  std::fill(blocks_.back().get(), blocks_.back().get() + size, std::numeric_limits<float>::quiet_NaN());
  return blocks_.back().get();
}

void CpuOps::zero(float* a, size_t n) { std::fill(a, a + n, 0.0f); }

void CpuOps::linear_forward(Kernels k, const float* x, const float* w, const float* bias, float* y, int64_t batch,
                            int64_t in, int64_t out) {
  cpu_kernels(k).forward(x, w, bias, y, batch, in, out);
}
void CpuOps::linear_grad_input(Kernels k, const float* gy, const float* w, float* gx, int64_t batch, int64_t in,
                               int64_t out) {
  cpu_kernels(k).grad_input(gy, w, gx, batch, in, out);
}
void CpuOps::linear_grad_weight(Kernels k, const float* gy, const float* x, float* gw, int64_t batch, int64_t in,
                                int64_t out) {
  cpu_kernels(k).grad_weight(gy, x, gw, batch, in, out);
}
void CpuOps::linear_grad_bias(Kernels k, const float* gy, float* gb, int64_t batch, int64_t out) {
  cpu_kernels(k).grad_bias(gy, gb, batch, out);
}

void CpuOps::relu_forward(const float* pre, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = pre[i] < 0.0f ? 0.0f : pre[i];
}
void CpuOps::relu_backward(const float* pre, float* g, size_t n) {
  for (size_t i = 0; i < n; ++i) g[i] = pre[i] > 0.0f ? g[i] : 0.0f;
}

void CpuOps::mse(const float* out, const float* y, float* grad, float* loss, size_t n, float grad_scale) {
  if (n == 0) return;
  for (size_t i = 0; i < n; ++i) {
    const float d = out[i] - y[i];
    grad[i] = d * grad_scale;
  }
  // mse_loss_k: one block of 1024 threads, thread t summing elements t, t + 1024, ...; then a tree.
  constexpr size_t kThreads = 1024;
  float part[kThreads];
  for (size_t t = 0; t < kThreads; ++t) {
    float acc = 0.0f;
    for (size_t i = t; i < n; i += kThreads) {
      const float d = out[i] - y[i];
      acc = acc + d * d;
    }
    part[t] = acc;
  }
  for (size_t half = kThreads / 2; half > 0; half /= 2) {
    for (size_t t = 0; t < half; ++t) part[t] = part[t] + part[t + half];
  }
  *loss = part[0] / static_cast<float>(n);
}

void CpuOps::add(float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] = a[i] + b[i];
}
void CpuOps::scale_copy(float* dst, const float* src, size_t n, float scale) {
  for (size_t i = 0; i < n; ++i) dst[i] = src[i] * scale;
}
void CpuOps::divide(float* a, size_t n, float d) {
  for (size_t i = 0; i < n; ++i) a[i] = a[i] / d;
}
void CpuOps::copy(float* dst, const float* src, size_t n) { std::copy(src, src + n, dst); }

void CpuOps::sgd(float* p, const float* g, size_t n, float neg_lr) {
  for (size_t i = 0; i < n; ++i) p[i] = std::fma(g[i], neg_lr, p[i]);
}
void CpuOps::sgd_momentum(float* p, const float* g, float* buf, size_t n, bool first, float momentum,
                          float one_minus_dampening, float neg_lr) {
  for (size_t i = 0; i < n; ++i) {
    const float b = first ? g[i] : std::fma(g[i], one_minus_dampening, buf[i] * momentum);
    buf[i] = b;
    p[i] = std::fma(b, neg_lr, p[i]);
  }
}
void CpuOps::adam(float* p, const float* g, float* m, float* v, size_t n, const AdamScalars& s) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = std::fma(gi, s.one_minus_beta1, m[i] * s.beta1);
    const float vi = std::fma(s.one_minus_beta2 * gi, gi, v[i] * s.beta2);
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / s.bias_correction2_sqrt + s.eps;
    p[i] = p[i] + s.neg_step_size * mi / denom;
  }
}

}  // namespace ddplab::device
