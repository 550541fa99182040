// The device-resident trainer's element-wise kernels (see gpu_trainer_ops.h). Each thread computes what
// one iteration of the host loop computes, in the same order of operations; cuda_library compiles this
// with --fmad=false, so the only fused multiply-adds are the fmaf calls, placed where src/train/optim.cc calls
// std::fma. Division and sqrtf are nvcc's IEEE defaults (no fast math).
#include "src/nccl/gpu_trainer_ops.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ddplab::dist::gpu {
namespace {

constexpr unsigned kThreads = 256;

unsigned blocks(size_t n) { return static_cast<unsigned>(std::min<size_t>((n + kThreads - 1) / kThreads, 8192)); }
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
void launched(const char* name) {
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    throw std::runtime_error(std::string(name) + ": " + cudaGetErrorString(e));
  }
}

// Grid-stride loop over n elements.
#define FOR_EACH(i, n)                                                                 \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

__global__ void relu_forward_k(const float* pre, float* out, size_t n) {
  FOR_EACH(i, n) {
    const float h = pre[i];
    out[i] = h < 0.0f ? 0.0f : h;
  }
}
__global__ void relu_backward_k(const float* pre, float* g, size_t n) {
  FOR_EACH(i, n) g[i] = pre[i] > 0.0f ? g[i] : 0.0f;
}
__global__ void mse_grad_k(const float* out, const float* y, float* grad, size_t n, float scale) {
  FOR_EACH(i, n) {
    const float d = out[i] - y[i];
    grad[i] = d * scale;
  }
}
// One block: each thread sums its stride of squares, then a fixed tree. Deterministic, not PyTorch's order.
constexpr unsigned kLossThreads = 1024;
__global__ void mse_loss_k(const float* out, const float* y, float* loss, size_t n) {
  __shared__ float part[kLossThreads];
  float acc = 0.0f;
  for (size_t i = threadIdx.x; i < n; i += kLossThreads) {
    const float d = out[i] - y[i];
    acc = acc + d * d;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned half = kLossThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] = part[threadIdx.x] + part[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = part[0] / static_cast<float>(n);
}
__global__ void add_k(float* a, const float* b, size_t n) { FOR_EACH(i, n) a[i] = a[i] + b[i]; }
__global__ void scale_copy_k(float* dst, const float* src, size_t n, float scale) {
  FOR_EACH(i, n) dst[i] = src[i] * scale;
}
__global__ void divide_k(float* a, size_t n, float d) { FOR_EACH(i, n) a[i] = a[i] / d; }
__global__ void sgd_k(float* p, const float* g, size_t n, float neg_lr) {
  FOR_EACH(i, n) p[i] = fmaf(g[i], neg_lr, p[i]);
}
__global__ void sgd_momentum_k(float* p, const float* g, float* buf, size_t n, bool first, float momentum,
                               float one_minus_dampening, float neg_lr) {
  FOR_EACH(i, n) {
    // buf.mul_(momentum) rounds on its own, then buf.add_(d_p, alpha=1-dampening) is one fma.
    const float b = first ? g[i] : fmaf(g[i], one_minus_dampening, buf[i] * momentum);
    buf[i] = b;
    p[i] = fmaf(b, neg_lr, p[i]);
  }
}
__global__ void adam_k(float* p, const float* g, float* m, float* v, size_t n, AdamScalars s) {
  FOR_EACH(i, n) {
    const float gi = g[i];
    const float mi = fmaf(gi, s.one_minus_beta1, m[i] * s.beta1);
    const float vi = fmaf(s.one_minus_beta2 * gi, gi, v[i] * s.beta2);
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / s.bias_correction2_sqrt + s.eps;
    p[i] = p[i] + s.neg_step_size * mi / denom;
  }
}

}  // namespace

void relu_forward(const float* pre, float* out, size_t n, void* stream) {
  if (n == 0) return;
  relu_forward_k<<<blocks(n), kThreads, 0, as_stream(stream)>>>(pre, out, n);
  launched("relu_forward");
}
void relu_backward(const float* pre, float* g, size_t n, void* stream) {
  if (n == 0) return;
  relu_backward_k<<<blocks(n), kThreads, 0, as_stream(stream)>>>(pre, g, n);
  launched("relu_backward");
}
void mse(const float* out, const float* y, float* grad, float* loss, size_t n, float grad_scale, void* stream) {
  if (n == 0) return;
  mse_grad_k<<<blocks(n), kThreads, 0, as_stream(stream)>>>(out, y, grad, n, grad_scale);
  launched("mse_grad");
  mse_loss_k<<<1, kLossThreads, 0, as_stream(stream)>>>(out, y, loss, n);
  launched("mse_loss");
}
void add(float* a, const float* b, size_t n, void* stream) {
  if (n == 0) return;
  add_k<<<blocks(n), kThreads, 0, as_stream(stream)>>>(a, b, n);
  launched("add");
}
void scale_copy(float* dst, const float* src, size_t n, float scale, void* stream) {
  if (n == 0) return;
  scale_copy_k<<<blocks(n), kThreads, 0, as_stream(stream)>>>(dst, src, n, scale);
  launched("scale_copy");
}
void divide(float* a, size_t n, float d, void* stream) {
  if (n == 0) return;
  divide_k<<<blocks(n), kThreads, 0, as_stream(stream)>>>(a, n, d);
  launched("divide");
}
void copy(float* dst, const float* src, size_t n, void* stream) {
  if (n == 0) return;
  if (cudaError_t e = cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, as_stream(stream));
      e != cudaSuccess) {
    throw std::runtime_error(std::string("cudaMemcpyAsync (device to device): ") + cudaGetErrorString(e));
  }
}
void sgd(float* p, const float* g, size_t n, float neg_lr, void* stream) {
  if (n == 0) return;
  sgd_k<<<blocks(n), kThreads, 0, as_stream(stream)>>>(p, g, n, neg_lr);
  launched("sgd");
}
void sgd_momentum(float* p, const float* g, float* buf, size_t n, bool first, float momentum, float one_minus_dampening,
                  float neg_lr, void* stream) {
  if (n == 0) return;
  sgd_momentum_k<<<blocks(n), kThreads, 0, as_stream(stream)>>>(p, g, buf, n, first, momentum, one_minus_dampening,
                                                                neg_lr);
  launched("sgd_momentum");
}
void adam(float* p, const float* g, float* m, float* v, size_t n, const AdamScalars& s, void* stream) {
  if (n == 0) return;
  adam_k<<<blocks(n), kThreads, 0, as_stream(stream)>>>(p, g, m, v, n, s);
  launched("adam");
}

}  // namespace ddplab::dist::gpu
