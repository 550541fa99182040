#include "src/nccl/cuda_ops.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <exception>
#include <stdexcept>

#include <fmt/format.h>

#include "src/tensor/cuda_kernels.h"
#include "src/nccl/gpu_trainer_ops.h"

namespace ddplab::dist {
namespace {

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", call, cudaGetErrorString(e)));
}
#define CUDA(call) check((call), #call)

}  // namespace

CudaStreamOps::~CudaStreamOps() {
  if (keep_ || std::uncaught_exceptions() > 0) return;
  for (void* p : device_) cudaFree(p);
  for (void* p : pinned_) cudaFreeHost(p);
  for (void* e : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

float* CudaStreamOps::alloc(size_t n) {
  void* p = nullptr;
  CUDA(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)));
  device_.push_back(p);
  return static_cast<float*>(p);
}

float* CudaStreamOps::alloc_host(size_t n) {
  void* p = nullptr;
  CUDA(cudaMallocHost(&p, std::max<size_t>(n, 1) * sizeof(float)));
  pinned_.push_back(p);
  return static_cast<float*>(p);
}

void CudaStreamOps::zero(float* a, size_t n) {
  CUDA(cudaMemsetAsync(a, 0, n * sizeof(float), static_cast<cudaStream_t>(stream_)));
}

void CudaStreamOps::upload(float* dst, const float* host, size_t n) {
  if (n == 0) return;
  CUDA(cudaMemcpyAsync(dst, host, n * sizeof(float), cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_)));
}

void CudaStreamOps::download(float* host, const float* src, size_t n) {
  if (n == 0) return;
  CUDA(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_)));
}

device::Ops::Event CudaStreamOps::event() {
  cudaEvent_t e = nullptr;
  CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  events_.push_back(e);
  return e;
}

void CudaStreamOps::record(Event e) {
  CUDA(cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(stream_)));
}
void CudaStreamOps::sync(Event e) { CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(e))); }
void CudaStreamOps::wait() { CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_))); }

void CudaStreamOps::linear_forward(Kernels k, const float* x, const float* w, const float* bias, float* y,
                                   int64_t batch, int64_t in, int64_t out) {
  dev::linear_forward(k, x, w, bias, y, batch, in, out, stream_);
}
void CudaStreamOps::linear_grad_input(Kernels k, const float* gy, const float* w, float* gx, int64_t batch, int64_t in,
                                      int64_t out) {
  dev::linear_grad_input(k, gy, w, gx, batch, in, out, stream_);
}
void CudaStreamOps::linear_grad_weight(Kernels k, const float* gy, const float* x, float* gw, int64_t batch, int64_t in,
                                       int64_t out) {
  dev::linear_grad_weight(k, gy, x, gw, batch, in, out, stream_);
}
void CudaStreamOps::linear_grad_bias(Kernels, const float* gy, float* gb, int64_t batch, int64_t out) {
  dev::linear_grad_bias(gy, gb, batch, out, stream_);
}

void CudaStreamOps::relu_forward(const float* pre, float* out, size_t n) { gpu::relu_forward(pre, out, n, stream_); }
void CudaStreamOps::relu_backward(const float* pre, float* g, size_t n) { gpu::relu_backward(pre, g, n, stream_); }
void CudaStreamOps::mse(const float* out, const float* y, float* grad, float* loss, size_t n, float grad_scale) {
  gpu::mse(out, y, grad, loss, n, grad_scale, stream_);
}
void CudaStreamOps::add(float* a, const float* b, size_t n) { gpu::add(a, b, n, stream_); }
void CudaStreamOps::scale_copy(float* dst, const float* src, size_t n, float scale) {
  gpu::scale_copy(dst, src, n, scale, stream_);
}
void CudaStreamOps::divide(float* a, size_t n, float d) { gpu::divide(a, n, d, stream_); }
void CudaStreamOps::copy(float* dst, const float* src, size_t n) { gpu::copy(dst, src, n, stream_); }

void CudaStreamOps::sgd(float* p, const float* g, size_t n, float neg_lr) { gpu::sgd(p, g, n, neg_lr, stream_); }
void CudaStreamOps::sgd_momentum(float* p, const float* g, float* buf, size_t n, bool first, float momentum,
                                 float one_minus_dampening, float neg_lr) {
  gpu::sgd_momentum(p, g, buf, n, first, momentum, one_minus_dampening, neg_lr, stream_);
}
void CudaStreamOps::adam(float* p, const float* g, float* m, float* v, size_t n, const device::AdamScalars& s) {
  const gpu::AdamScalars sc{
      s.beta1, s.beta2, s.one_minus_beta1, s.one_minus_beta2, s.neg_step_size, s.bias_correction2_sqrt, s.eps};
  gpu::adam(p, g, m, v, n, sc, stream_);
}

}  // namespace ddplab::dist
