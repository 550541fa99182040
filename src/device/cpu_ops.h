// The graph trainer's operations in host memory (src/device/ops.h): the host model's LinearKernels
// (cpu_kernels(k), src/tensor/kernels.h) and, for the rest, loops that are the exact twins of the CUDA kernels in
// src/nccl/gpu_trainer.cu (each iteration what one CUDA thread computes, in its order; no fused multiply-add
// but std::fma where the kernel calls fmaf). Nothing is deferred: every call finishes before it returns.
#pragma once

#include <memory>
#include <vector>

#include "src/device/ops.h"

namespace ddplab::device {

class CpuOps : public Ops {
 public:
  // alloc'd memory starts as NaN, so that reading what was never written shows in the results.
  float* alloc(size_t n) override;
  float* alloc_host(size_t n) override { return alloc(n); }
  void keep_memory() override {}
  void zero(float* a, size_t n) override;
  void upload(float* dst, const float* host, size_t n) override { copy(dst, host, n); }
  void download(float* host, const float* src, size_t n) override { copy(host, src, n); }

  Event event() override { return nullptr; }
  void record(Event) override {}
  void sync(Event) override {}
  void wait() override {}

  void all_reduce(comm::Communicator& comm, float* a, size_t n, comm::ReduceOp op) override {
    comm.all_reduce(a, n, op);
  }
  void broadcast(comm::Communicator& comm, float* a, size_t n, int root) override { comm.broadcast(a, n, root); }

  void linear_forward(Kernels k, const float* x, const float* w, const float* bias, float* y, int64_t batch, int64_t in,
                      int64_t out) override;
  void linear_grad_input(Kernels k, const float* gy, const float* w, float* gx, int64_t batch, int64_t in,
                         int64_t out) override;
  void linear_grad_weight(Kernels k, const float* gy, const float* x, float* gw, int64_t batch, int64_t in,
                          int64_t out) override;
  void linear_grad_bias(Kernels k, const float* gy, float* gb, int64_t batch, int64_t out) override;

  void relu_forward(const float* pre, float* out, size_t n) override;
  void relu_backward(const float* pre, float* g, size_t n) override;
  void mse(const float* out, const float* y, float* grad, float* loss, size_t n, float grad_scale) override;
  void add(float* a, const float* b, size_t n) override;
  void scale_copy(float* dst, const float* src, size_t n, float scale) override;
  void divide(float* a, size_t n, float d) override;
  void copy(float* dst, const float* src, size_t n) override;

  void sgd(float* p, const float* g, size_t n, float neg_lr) override;
  void sgd_momentum(float* p, const float* g, float* buf, size_t n, bool first, float momentum,
                    float one_minus_dampening, float neg_lr) override;
  void adam(float* p, const float* g, float* m, float* v, size_t n, const AdamScalars& s) override;

 private:
  std::vector<std::unique_ptr<float[]>> blocks_;
};

}  // namespace ddplab::device
