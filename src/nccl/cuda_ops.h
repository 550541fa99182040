// The graph trainer's operations on one CUDA stream (src/device/ops.h): thin wrappers over the device
// entry points of src/tensor/cuda_kernels.h (Linear) and src/nccl/gpu_trainer_ops.h (the rest), device memory
// from cudaMalloc, host memory pinned, collectives through the communicator's _device calls. Everything
// is enqueued on the stream; only sync, wait and nothing else waits. Built only where CUDA is.
#pragma once

#include <vector>

#include "src/device/ops.h"

namespace ddplab::dist {

class CudaStreamOps : public device::Ops {
 public:
  explicit CudaStreamOps(void* stream) : stream_(stream) {}  // a cudaStream_t
  // Frees everything, unless keep_memory() was called or an exception is unwinding: cudaFree synchronises
  // with the device, and a failed collective may have left a kernel behind (the NCCL communicator frees
  // nothing after an abort either; the process is about to exit).
  ~CudaStreamOps() override;

  float* alloc(size_t n) override;
  float* alloc_host(size_t n) override;
  void keep_memory() override { keep_ = true; }
  void zero(float* a, size_t n) override;
  void upload(float* dst, const float* host, size_t n) override;
  void download(float* host, const float* src, size_t n) override;

  Event event() override;
  void record(Event e) override;
  void sync(Event e) override;
  void wait() override;

  void all_reduce(comm::Communicator& comm, float* a, size_t n, comm::ReduceOp op) override {
    comm.all_reduce_device(a, n, op);
  }
  void broadcast(comm::Communicator& comm, float* a, size_t n, int root) override { comm.broadcast_device(a, n, root); }

  void linear_forward(Kernels k, const float* x, const float* w, const float* bias, float* y, int64_t batch, int64_t in,
                      int64_t out) override;
  void linear_grad_input(Kernels k, const float* gy, const float* w, float* gx, int64_t batch, int64_t in,
                         int64_t out) override;
  void linear_grad_weight(Kernels k, const float* gy, const float* x, float* gw, int64_t batch, int64_t in,
                          int64_t out) override;
  // Both modes sum in the reference order on the GPU (src/tensor/cuda_kernels.h).
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
  void adam(float* p, const float* g, float* m, float* v, size_t n, const device::AdamScalars& s) override;

 private:
  void* stream_;
  bool keep_ = false;
  std::vector<void*> device_, pinned_, events_;
};

}  // namespace ddplab::dist
