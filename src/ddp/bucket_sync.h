// The synchronised backward's bucket loop, written once (reducer.cpp's mark_variable_ready ->
// all-reduce -> finalize_bucket_dense, bucket by bucket in order), over an interface that says where the
// tensors live: host memory and a Communicator (the Gloo verifier, the labs) or the graph trainer's Ops
// (src/device/replica.cc: host memory, or a device stream and NCCL). The simulator reduces every rank's
// bucket at once and keeps its own schedule (trainer.cc's InProcessAllreduce), with the same arithmetic
// from Reducer::prepare_bucket/finalize_bucket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/comm/communicator.h"
#include "src/ddp/reducer.h"

namespace ddplab::ddp {

// The tensor operations the loop needs. Pointers are where the implementation keeps its tensors.
class SyncOps {
 public:
  virtual ~SyncOps() = default;
  virtual float* grad(size_t param) = 0;    // the .grad of the reducer's parameter `param`
  virtual float* bucket(size_t numel) = 0;  // room for one bucket's contents
  // at::mul_out(bucket_view, grad, 1.0 / world_size): dst = src * scale, one float multiply each.
  virtual void scale_copy(float* dst, const float* src, size_t n, float scale) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;
  virtual void divide(float* a, size_t n, float d) = 0;  // a = a / d (postdivide)
  virtual void all_reduce(float* a, size_t n, comm::ReduceOp op) = 0;
  // The process group a communication hook talks to, when the buckets live in host memory (null: this
  // implementation runs no hooks).
  virtual comm::Communicator* hook_comm() { return nullptr; }
};

// Every bucket of `reducer` in order (the first `num_buckets` when fewer: DDP stops at a bucket that waits
// for a grad that never comes): its gradients copied in (times float(1/world_size) unless the reducer's
// averaging says otherwise), all-reduced, divided when postdivide, and copied back to .grad. With a comm
// hook registered the raw gradients go through the hook instead of the all-reduce; its reports come back,
// one per bucket. Does not rebuild the buckets: the caller calls reducer.finish_sync(ready) after.
std::vector<HookReport> sync_buckets(Reducer& reducer, SyncOps& ops, size_t num_buckets = SIZE_MAX);

// One rank's buckets through its registered hook, on host memory: prepare_bucket (raw gradients; zeros
// for parameters this backward did not reach), the hook over `comm`, finalize_bucket. `flat` has room
// for the largest bucket. What sync_buckets does with a hook, and the simulator's ranks on their threads.
std::vector<HookReport> hook_buckets(Reducer& reducer, comm::Communicator& comm, float* flat,
                                     size_t num_buckets = SIZE_MAX);

// SyncOps on the host: .grad of the Parameters, one reusable bucket buffer, `comm.all_reduce`.
class HostSyncOps : public SyncOps {
 public:
  HostSyncOps(std::vector<Parameter*> params, comm::Communicator& comm) : params_(std::move(params)), comm_(comm) {}
  float* grad(size_t param) override;
  float* bucket(size_t numel) override;
  void scale_copy(float* dst, const float* src, size_t n, float scale) override;
  void copy(float* dst, const float* src, size_t n) override;
  void divide(float* a, size_t n, float d) override;
  void all_reduce(float* a, size_t n, comm::ReduceOp op) override { comm_.all_reduce(a, n, op); }
  comm::Communicator* hook_comm() override { return &comm_; }

 private:
  std::vector<Parameter*> params_;
  comm::Communicator& comm_;
  std::vector<float> bucket_;
};

}  // namespace ddplab::ddp
