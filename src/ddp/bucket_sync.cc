#include "src/ddp/bucket_sync.h"

#include <algorithm>
#include <stdexcept>

namespace ddplab::ddp {

std::vector<HookReport> hook_buckets(Reducer& reducer, comm::Communicator& comm, float* flat, size_t num_buckets) {
  std::vector<HookReport> reports;
  const std::string where = comm.context;  // the caller's "step S: ", if any
  for (size_t j = 0; j < std::min(reducer.num_buckets(), num_buckets); ++j) {
    comm.context = where + "bucket " + std::to_string(j) + "'s comm hook";
    reducer.prepare_bucket(j, flat);
    GradBucket g = reducer.grad_bucket(j, flat);
    reports.push_back(reducer.comm_hook()->run(g, comm));
    reports.back().numel = g.numel;
    reducer.finalize_bucket(j, flat);
  }
  comm.context = where;
  return reports;
}

std::vector<HookReport> sync_buckets(Reducer& reducer, SyncOps& ops, size_t num_buckets) {
  if (reducer.comm_hook()) {
    comm::Communicator* comm = ops.hook_comm();
    if (!comm) throw RunError("a communication hook runs on host buffers: this trainer keeps its buckets elsewhere");
    return hook_buckets(reducer, *comm, ops.bucket(reducer.max_bucket_numel()), num_buckets);
  }
  const bool scale_in = reducer.scales_in();
  const float scale = reducer.prepare_scale();
  const auto ws = static_cast<float>(reducer.world_size());
  const comm::ReduceOp op = reducer.backend_averages() ? comm::ReduceOp::avg : comm::ReduceOp::sum;
  for (size_t j = 0; j < std::min(reducer.num_buckets(), num_buckets); ++j) {
    const Bucket& b = reducer.bucket(j);
    float* flat = ops.bucket(b.numel);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const size_t n = reducer.numel(b.params[k]);
      if (scale_in) {
        ops.scale_copy(flat + b.offsets[k], ops.grad(b.params[k]), n, scale);
      } else {
        ops.copy(flat + b.offsets[k], ops.grad(b.params[k]), n);
      }
    }
    if (reducer.divides_in()) ops.divide(flat, b.numel, ws);
    ops.all_reduce(flat, b.numel, op);
    if (reducer.postdivides()) ops.divide(flat, b.numel, ws);
    if (reducer.multiplies_out()) ops.scale_copy(flat, flat, b.numel, scale);
    for (size_t k = 0; k < b.params.size(); ++k) {
      ops.copy(ops.grad(b.params[k]), flat + b.offsets[k], reducer.numel(b.params[k]));
    }
  }
  return {};
}

float* HostSyncOps::grad(size_t param) {
  Parameter& p = *params_.at(param);
  if (!p.has_grad) throw std::logic_error("parameter " + p.name + " has no gradient: DDP needs every parameter used");
  return p.grad.data();
}

float* HostSyncOps::bucket(size_t numel) {
  if (bucket_.size() < numel) bucket_.resize(numel);
  return bucket_.data();
}

void HostSyncOps::scale_copy(float* dst, const float* src, size_t n, float scale) {
  for (size_t k = 0; k < n; ++k) dst[k] = src[k] * scale;
}

void HostSyncOps::copy(float* dst, const float* src, size_t n) { std::copy(src, src + n, dst); }

void HostSyncOps::divide(float* a, size_t n, float d) {
  for (size_t k = 0; k < n; ++k) a[k] = a[k] / d;
}

}  // namespace ddplab::ddp
