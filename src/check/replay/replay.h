// The two halves of a step ddp_check predicts: DDP's synchronised backward (every rank's accumulated
// local gradients through a Reducer per rank, its buckets and the backend's all-reduce order, or a comm
// hook) and the optimizer step (torch.optim's arithmetic from the recorded parameters, gradients and
// state).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/base/parallel.h"
#include "src/check/trace/trace.h"
#include "src/collective/allreduce.h"
#include "src/ddp/hooked_sync.h"
#include "src/ddp/reducer.h"
#include "src/ddp/trainer.h"
#include "src/tensor/tensor.h"

namespace ddplab::check {

// FSDP2's synchronised backward (torch 2.x fully_shard, manifest "fsdp"): each rank's unsharded local gradients
// accumulated as autograd accumulates them on FSDP's unsharded parameters, reduce-scattered group by group at each
// synchronised backward (collective::fsdp_reduce_scatter: Gloo's ring over the group's padded flat buffer, then a
// true division by world_size), each rank's shard added to its sharded .grad (set, where .grad is None).
class FsdpReplay {
 public:
  explicit FsdpReplay(const Run& run);
  // params[r][i]: rank r's shard of parameter i, .grad predicted.
  bool predict(const std::vector<const StepRecord*>& recs, std::vector<std::vector<Parameter>>* params,
               std::string* why);
  std::string groups() const;
  // The last predicted step ended with gradients not yet reduce-scattered: a backward after the step's last
  // synchronised one (they reach the shards at a later step's reduce-scatter).
  bool unreduced() const { return carried_from_ >= 0; }

 private:
  const Run& run_;
  // [rank][param]: the unsharded gradient accumulated since the last reduce-scatter (backwards under
  // set_requires_gradient_sync(False)), carried to the next step when its last backward did not reduce.
  std::vector<std::vector<std::vector<float>>> unsharded_;
  int64_t carried_from_ = -1;  // the step whose unreduced gradients unsharded_ holds (-1: none)
  std::vector<size_t> group_of_;  // parameter -> its group
};

// One element of a whole-run step's sample (sample_replay.cc): parameter `param`, row-major element `element`.
struct SampleSlot {
  size_t param = 0;
  int64_t element = 0;
};

class GradReplay {
 public:
  explicit GradReplay(const Run& run);
  // Where the ranks' buckets are prepared and all-reduced side by side (the same bits; null: one thread).
  void set_pool(ThreadPool* pool) { pool_ = pool; }

  // Every rank's .grad after the step's backwards (local gradients accumulated, each synchronised backward
  // reduced as DDP reduces it). false (and `why` set) when the step cannot be predicted.
  // recs[r] is null for a rank that has joined (Join): it contributes zeros to every all-reduce.
  bool predict(const std::vector<const StepRecord*>& recs, std::string* why);
  // A whole-run step's sample (sample_replay.cc): every rank's .grad after DDP at the sampled elements,
  // grad[rank][slot], from the sampled prior and local gradients, accumulated and all-reduced as predict() does
  // whole tensors, in the current bucket layout and the run's order; known[slot] false where some rank holds no
  // gradient there. false (and `why`) where the sample cannot be replayed bit for bit.
  bool predict_sample(const std::vector<const StepRecord*>& recs, const std::vector<SampleSlot>& plan,
                      std::vector<std::vector<float>>* grad, std::vector<bool>* known, std::string* why) const;
  // A whole-run step's weighted sums (wsum_check.cc): per parameter, the ranks' local sums accumulated as
  // AccumulateGrad does and scaled as the Reducer does, and the rounding bound around it. false (and `why`)
  // where the step's all-reduce is not a plain sum of the local gradients.
  struct WsumExpect {
    bool known = false;
    double sum = 0.0, bound = 0.0;
  };
  bool wsum_expect(const std::vector<const StepRecord*>& recs, std::vector<WsumExpect>* out, std::string* why) const;
  // Rank r's predicted parameter i (.grad meaningful when has_grad).
  const Parameter& param(int r, size_t i) const { return params_[static_cast<size_t>(r)][i]; }

  bool exact_expected() const { return exact_; }
  // false when the run's comm hook is one torch ships that ddplab does not model: gradients not compared.
  bool grads_checked() const { return grads_checked_; }
  const std::string& grads_why() const { return grads_why_; }
  // Each rank keeps its own gradient by design from this iteration on (noop_hook, local SGD; post-local SGD
  // over subgroups ddp_check does not model counts as local throughout): replicas are not compared.
  bool local_gradients() const {
    const std::string& hook = run_.first().ddp.comm_hook;
    return hook == "noop" || (hook == "post_localSGD" && !grads_checked_) ||
           (local_sgd_switch_ >= 0 && syncs_ > local_sgd_switch_ && local_hook_ == "noop");
  }
  const std::string& order() const { return order_; }
  std::string buckets() const { return fsdp_ ? fsdp_->groups() : reducers_[0]->describe(); }
  // An FSDP2 run: each rank holds its own shard, so there are no replicas to compare.
  bool sharded() const { return fsdp_ != nullptr; }
  bool unreduced_at_step() const { return fsdp_ && fsdp_->unreduced(); }
  // Notes from the replay (a layout that differed from torch's), drained by the caller.
  std::vector<std::string> take_notes() { return std::move(notes_); }

 private:
  void sync(int64_t step);
  // The recorder's measured orders (Manifest::allreduce_order): each size whose chain reproduces the seeded
  // all-reduce's digest is replayed in it; whether every bucket size torch used has one.
  bool use_measured_orders(const Manifest& m, std::string* why);
  // torch's own layout (when recorded) against the replay's; the replay takes torch's, with a note.
  void check_layout(const std::vector<std::vector<size_t>>& torch, const char* when, int64_t step);

  const Run& run_;
  collective::Algorithm algorithm_ = collective::Algorithm::ring;
  bool exact_ = true;
  std::string order_;
  bool first_sync_done_ = false;
  bool grads_checked_ = true;
  std::string grads_why_;
  int64_t local_sgd_switch_ = -1;  // post-local SGD: synchronised backwards until its local part
  std::string local_hook_;         // what the local part is: "noop" (subgroups of one), "allreduce", "" unknown
  int64_t syncs_ = 0;
  std::vector<std::vector<Parameter>> params_;              // [rank][param]
  std::vector<std::unique_ptr<ddp::Reducer>> reducers_;     // one per rank
  std::unique_ptr<ddp::HookedAllreduce> hooked_;            // a known comm hook, per rank on threads
  ddp::InProcessAllreduce builtin_;
  ThreadPool* pool_ = nullptr;
  std::vector<std::string> notes_;
  std::map<size_t, const collective::MeasuredOrder*> measured_;  // confirmed, by bucket size
  std::unique_ptr<FsdpReplay> fsdp_;
  // Per parameter, TensorInfo::memory_order() where its memory is not row-major (channels_last), else empty: its
  // gradient is replayed in memory order, as DDP's bucket holds it, so Gloo's ring chunks the same elements.
  mutable std::vector<std::vector<int64_t>> memory_order_;
  Matrix in_memory_order(size_t i, const std::vector<float>& row_major) const;
};

// torch.optim's step for one rank from the recorded param_before, grad_step, state and lr; the predicted
// parameters in manifest order, and (when state_after is given) the state it leaves, keyed as the recorder
// keys it ("state/<name>/<key>"). false (and `why`) for an optimizer ddp_check does not model.
bool predict_step(const Manifest& m, const StepRecord& rec, std::vector<Matrix>* after, std::string* why,
                  safetensors::TensorMap* state_after = nullptr);

}  // namespace ddplab::check
