// The tensor operations the graph trainer (src/device/replica.h) runs, behind one interface with two
// implementations: CpuOps (host memory, src/device/cpu_ops.h) and CudaStreamOps (device memory and one CUDA
// stream, src/nccl/cuda_ops.h, built only where CUDA is). The semantics of each operation are those the CUDA
// kernels document (src/tensor/cuda_kernels.h for Linear, src/nccl/gpu_trainer_ops.h for the rest): CpuOps runs
// the host model's LinearKernels and host loops that are their exact twins, so the graph trainer can be
// checked on a CPU against the host trainer, bit for bit.
//
// Pointers are the implementation's memory (from alloc); work may be enqueued and run later, in order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/comm/communicator.h"
#include "src/tensor/kernels.h"

namespace ddplab::device {

// The scalars Adam::step computes on the host (doubles rounded to float), for one step count.
struct AdamScalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, neg_step_size, bias_correction2_sqrt, eps;
};

class Ops {
 public:
  virtual ~Ops() = default;

  // Memory, owned by the ops until it is destroyed. alloc: n floats where the ops compute (contents
  // undefined); alloc_host: host memory that upload/download copy from/to without waiting (pinned on CUDA).
  virtual float* alloc(size_t n) = 0;
  virtual float* alloc_host(size_t n) = 0;
  // After a failure that may have left work behind (a collective): free nothing at destruction.
  virtual void keep_memory() = 0;
  virtual void zero(float* a, size_t n) = 0;
  // Enqueued copies between alloc_host memory and alloc memory: the host memory must stay as it is (upload)
  // or unread (download) until a later sync/wait.
  virtual void upload(float* dst, const float* host, size_t n) = 0;
  virtual void download(float* host, const float* src, size_t n) = 0;

  // Ordering: record(e) marks the work enqueued so far; sync(e) waits until it is done; wait() waits for
  // everything. Only when no collective can be pending (a dead peer would hang the wait).
  using Event = void*;
  virtual Event event() = 0;
  virtual void record(Event e) = 0;
  virtual void sync(Event e) = 0;
  virtual void wait() = 0;

  // Collectives on this memory, through `comm` (Communicator::all_reduce or its _device twin).
  virtual void all_reduce(comm::Communicator& comm, float* a, size_t n, comm::ReduceOp op) = 0;
  virtual void broadcast(comm::Communicator& comm, float* a, size_t n, int root) = 0;

  // nn.Linear's four products (src/tensor/kernels.h), x [batch, in], W [out, in].
  virtual void linear_forward(Kernels k, const float* x, const float* w, const float* bias, float* y, int64_t batch,
                              int64_t in, int64_t out) = 0;
  virtual void linear_grad_input(Kernels k, const float* gy, const float* w, float* gx, int64_t batch, int64_t in,
                                 int64_t out) = 0;
  virtual void linear_grad_weight(Kernels k, const float* gy, const float* x, float* gw, int64_t batch, int64_t in,
                                  int64_t out) = 0;
  virtual void linear_grad_bias(Kernels k, const float* gy, float* gb, int64_t batch, int64_t out) = 0;

  // Element-wise (gpu_trainer_ops.h): ReLU's forward (out = h < 0 ? 0 : h) and backward in place (g = pre > 0
  // ? g : 0); MSE (d = out - y; grad = d * grad_scale; *loss = sum(d * d) / float(n), the sum in the CUDA
  // kernel's fixed order); autograd's accumulation a = a + b; the bucket copies.
  virtual void relu_forward(const float* pre, float* out, size_t n) = 0;
  virtual void relu_backward(const float* pre, float* g, size_t n) = 0;
  virtual void mse(const float* out, const float* y, float* grad, float* loss, size_t n, float grad_scale) = 0;
  virtual void add(float* a, const float* b, size_t n) = 0;
  virtual void scale_copy(float* dst, const float* src, size_t n, float scale) = 0;
  virtual void divide(float* a, size_t n, float d) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;

  // The optimizers' element-wise updates (src/train/optim.cc's, fused exactly where it calls std::fma).
  virtual void sgd(float* p, const float* g, size_t n, float neg_lr) = 0;
  virtual void sgd_momentum(float* p, const float* g, float* buf, size_t n, bool first, float momentum,
                            float one_minus_dampening, float neg_lr) = 0;
  virtual void adam(float* p, const float* g, float* m, float* v, size_t n, const AdamScalars& s) = 0;
};

}  // namespace ddplab::device
