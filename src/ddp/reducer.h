// DDP's Reducer for one rank (torch/csrc/distributed/c10d/reducer.cpp, torch 1.13): gradient buckets,
// averaging, and the one-time bucket rebuild. The all-reduce itself is the caller's: the simulator runs
// an in-process algorithm over every rank's bucket, the verifier a real communication library.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/collective/allreduce.h"
#include "src/ddp/comm_hook.h"
#include "src/tensor/tensor.h"

namespace ddplab::ddp {

// How gradients are averaged across ranks.
//  predivide : PyTorch's default: grad * float(1/world_size) copied into the bucket, then SUM all-reduce.
//  postdivide: the notebook's way: SUM all-reduce of the raw gradients, then / world_size.
//  avg       : NCCL's ncclAvg; for float32 NCCL pre-multiplies by float(1/nranks) (ncclDevPreMulSum),
//              so its arithmetic is predivide's, bit for bit.
// How a bucket is averaged. predivide: grad * float(1/ws), then SUM (DDP's); postdivide: SUM, then / ws (the
// notebook's, PyTorch's tutorial's); avg: the backend's average (NCCL's ncclAvg); and two more a hand-written
// sync computes: multiply: SUM, then * float(1/ws); divide_first: grad / ws, then SUM.
enum class Average { predivide, postdivide, avg, multiply, divide_first };

struct Bucket {
  std::vector<size_t> params;   // indices into the reducer's parameter list, in bucket order
  std::vector<size_t> offsets;  // where each parameter starts in the flat buffer
  size_t numel = 0;
};

// compute_bucket_assignment_by_size: walk `order`, add each tensor to the open bucket, and close the
// bucket once its size reaches the current limit (limits advance one per closed bucket, the last one
// repeats). Buckets may exceed their limit by one tensor.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& order, const std::vector<size_t>& bytes,
                                                const std::vector<size_t>& limits);

class Reducer {
 public:
  // DDP's defaults: find_unused_parameters=False, gradient_as_bucket_view=False, first bucket 1 MiB.
  static constexpr size_t kFirstBucketBytes = 1 << 20;

  Reducer(std::vector<Parameter*> params, int64_t world_size, double bucket_cap_mb, Average average);

  size_t num_buckets() const { return buckets_.size(); }
  const Bucket& bucket(size_t b) const { return buckets_[b]; }
  bool rebuilt() const { return rebuilt_; }

  size_t max_bucket_numel() const;
  // --average avg on a backend that averages itself (NCCL's ncclAvg): prepare copies without scaling.
  void set_backend_averages(bool v) { backend_averages_ = v; }
  bool backend_averages() const { return backend_averages_; }

  // DDP.register_comm_hook: from now on every bucket holds this rank's raw gradients (prepare copies,
  // whatever the averaging or gradient_as_bucket_view), and the synchronisation runs `hook` per bucket
  // instead of the all-reduce; finalize copies the hook's result into .grad as for the built-in path.
  void register_comm_hook(std::unique_ptr<CommHook> hook) { hook_ = std::move(hook); }
  CommHook* comm_hook() const { return hook_.get(); }
  // Bucket b as the hook sees it, its contents in `flat` (prepared by prepare_bucket).
  GradBucket grad_bucket(size_t b, float* flat) const;
  const std::vector<Parameter*>& params() const { return params_; }

  // The averaging arithmetic, for whoever runs the bucket loop (bucket_sync.h, the simulator):
  // prepare multiplies each gradient by prepare_scale() when scales_in(), else copies it; the all-reduce
  // sums (or averages, when the backend does); finalize divides by world_size when postdivides().
  bool scales_in() const;
  float prepare_scale() const { return static_cast<float>(1.0 / static_cast<double>(div_factor_)); }
  bool postdivides() const { return !hook_ && average_ == Average::postdivide; }
  bool multiplies_out() const { return !hook_ && average_ == Average::multiply; }  // finalize: * float(1/ws)
  bool divides_in() const { return !hook_ && average_ == Average::divide_first; }  // prepare: grad / ws
  int64_t world_size() const { return world_size_; }
  size_t numel(size_t param) const { return static_cast<size_t>(params_[param]->numel()); }
  const std::string& param_name(size_t param) const { return params_[param]->name; }

  // Join (src/ddp/join.h), per synchronised backward: div_factor_ in reducer.cpp, the world size or the
  // ranks not yet joined (divide_by_initial_world_size=False); and whether this rank has joined: a joined
  // rank all-reduces zeros in the current layout (_match_all_reduce_for_bwd_pass) and its grads stay.
  void set_join_state(bool joined, int64_t div_factor) {
    joined_ = joined;
    div_factor_ = div_factor;
  }
  bool joined() const { return joined_; }

  // mark_variable_ready: copy every gradient of bucket b into `flat` (bucket(b).numel floats), times
  // float(1/ws) unless postdivide. The caller all-reduces `flat`: buffers are the caller's, so a simulator
  // of N ranks needs N buffers of the largest bucket, not N copies of every bucket.
  void prepare_bucket(size_t b, float* flat) const;
  // finalize_bucket_dense: postdivide divides by ws; every .grad gets its averaged slice of `flat` back.
  void finalize_bucket(size_t b, float* flat);
  // The same for the elements [span.lo, span.hi) of the bucket only, `flat` pointing at element span.lo
  // (element-wise, so the same bits): the simulator prepares, all-reduces and finalizes a bucket block by
  // block in a small buffer that stays in cache.
  void prepare_bucket(size_t b, float* flat, collective::Span span) const;
  void finalize_bucket(size_t b, float* flat, collective::Span span);
  // DDP(find_unused_parameters=True), per synchronised backward, before its buckets are prepared: which
  // parameters this rank's backward did not reach (a slot without a grad is zeros, bucket_view.zero_())
  // and which no rank used (the all-reduced local_used_map: their .grad is left as it was).
  void set_unused(std::vector<bool> local_unused, std::vector<bool> global_unused);
  // DDP(gradient_as_bucket_view=True): once a grad has been written back it IS its bucket slot, and the
  // next synchronised backward averages it in place, bucket_view.div_(world_size), instead of
  // mul_out(bucket_view, grad, 1/world_size): a division, not a multiply by the rounded reciprocal.
  void set_gradient_as_bucket_view(bool v) { gradient_as_bucket_view_ = v; }
  bool gradient_as_bucket_view() const { return gradient_as_bucket_view_; }
  // optimizer.zero_grad(set_to_none=True): autograd makes new grads, none aliases its slot any more.
  void grads_set_to_none() { aliased_.assign(params_.size(), false); }
  bool aliased(size_t param) const { return aliased_[param]; }

  // After the first synchronised backward: rebuild buckets in gradient-ready order (`ready`, as the
  // model's backward recorded it; parameters it misses follow in reverse model order) with limits
  // [1 MiB, bucket_cap_mb]. Iteration 0 used one bucket holding every parameter in model order.
  void finish_sync(const std::vector<Parameter*>& ready = {});
  // DDP(find_unused_parameters=True) without static_graph (torch 1.13 distributed.py:720): iteration 0's
  // buckets are limited from the start, [1 MiB, bucket_cap_mb] filled in model order, the list reversed
  // (the last parameters' bucket all-reduces first); they are never rebuilt.
  void use_size_limited_initial_buckets();
  // The first rebuilt bucket's cap: dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB) in 1.13; torch 2.x caps it at
  // bucket_cap_mb when the script gave one (ddp_check reads which from the recorded run).
  void set_first_bucket_bytes(size_t bytes) { first_bucket_bytes_ = bytes; }
  // A layout given from outside (ddp_check: torch's own, as a recorded run reported it); `rebuilt`: kept
  // from now on (else the first synchronised backward still rebuilds from its ready order).
  void set_layout(const std::vector<std::vector<size_t>>& assignment, bool rebuilt = true) {
    set_buckets(assignment);
    rebuilt_ = rebuilt;
  }

  // "[layers.1.bias layers.1.weight] 38 floats" per bucket, for learners.
  std::string describe() const;

 private:
  void set_buckets(const std::vector<std::vector<size_t>>& assignment);

  std::vector<Parameter*> params_;
  int64_t world_size_;
  size_t cap_bytes_;
  size_t first_bucket_bytes_ = kFirstBucketBytes;
  Average average_;
  bool rebuilt_ = false;
  bool joined_ = false;
  int64_t div_factor_;
  bool backend_averages_ = false;
  bool gradient_as_bucket_view_ = false;
  std::vector<bool> aliased_;                       // grad is its bucket slot (gradient_as_bucket_view)
  std::vector<bool> local_unused_, global_unused_;  // find_unused_parameters: this backward's
  std::vector<Bucket> buckets_;
  std::unique_ptr<CommHook> hook_;
};

}  // namespace ddplab::ddp
