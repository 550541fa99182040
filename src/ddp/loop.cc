#include "src/ddp/loop.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "src/train/clip_grad.h"
#include "src/ddp/join.h"
#include "src/ddp/replica.h"
#include "src/base/errors.h"
#include "src/base/progress.h"

namespace ddplab::ddp {

std::string unfinished_reduction_message(const UnfinishedReduction& e) {
  std::string idx, names;
  for (size_t i = 0; i < e.indices.size(); ++i) {
    idx += fmt::format("{}{}", i ? " " : "", e.indices[i]);
    names += fmt::format("{}{}", i ? ", " : "", e.params[i]);
  }
  return fmt::format(
      "step {} micro-step {}: Expected to have finished reduction in the prior iteration before starting a new "
      "one. This error indicates that your module has parameters that were not used in producing loss. "
      "(torch 1.13 raises it here, in DDP's forward.) Parameter indices which did not receive grad for rank 0: {}. "
      "Those are {} (torch prints the indices; their names under TORCH_DISTRIBUTED_DEBUG=INFO or DETAIL). Why: with "
      "find_unused_parameters=False every "
      "bucket waits for every parameter's grad, so the previous step's reduction never finished; "
      "--find-unused-parameters true marks them ready at the start of the backward.",
      e.step, e.micro, idx, names);
}

std::vector<std::vector<size_t>> hand_sync_layout(const Config& cfg, const std::vector<Parameter*>& params) {
  std::vector<std::vector<size_t>> out;
  std::vector<size_t> order(params.size()), bytes(params.size());
  for (size_t i = 0; i < params.size(); ++i) order[i] = i, bytes[i] = static_cast<size_t>(params[i]->numel()) * 4;
  switch (cfg.hand_sync) {
    case HandSync::per_parameter:
      for (size_t i : order) out.push_back({i});
      return out;
    case HandSync::flat:
      return {order};
    case HandSync::buckets:
      std::reverse(order.begin(), order.end());
      return assign_buckets(order, bytes, {static_cast<size_t>(cfg.bucket_cap_mb * 1024 * 1024)});
    case HandSync::none:
      break;
  }
  return out;
}

void init_ddp(const Config& cfg, TrainingRank& rank, const std::function<void(TrainingRank&)>& broadcast) {
  if (cfg.broadcast) broadcast(rank);
  rank.reducer = std::make_unique<Reducer>(rank.parameters(), cfg.world_size, cfg.bucket_cap_mb, cfg.average);
  rank.reducer->set_gradient_as_bucket_view(cfg.gradient_as_bucket_view);
  if (cfg.hand_sync != HandSync::none) rank.reducer->set_layout(hand_sync_layout(cfg, rank.parameters()), true);
  if (cfg.find_unused_parameters && !cfg.static_graph) rank.reducer->use_size_limited_initial_buckets();
  if (auto hook = make_comm_hook(cfg.comm_hook)) {
    rank.reducer->register_comm_hook(cfg.compare_hook ? compared_to_builtin(std::move(hook)) : std::move(hook));
  }
  // The training script's torch.manual_seed(seed + rank) after DDP(model): only later draws (the loader's,
  // Dropout's) see it. (The GPT's seed_offset comes before its model instead: GptRank's constructor.)
  if (cfg.seed_per_rank && !cfg.is_gpt()) rank.gen.manual_seed(cfg.seed + static_cast<uint64_t>(rank.rank));
}

namespace {

// What one local rank does in a round: its micro-batch (b of `epoch`, part of optimizer step `step`), or
// nothing (it has joined: out of batches, it shadows the others' collectives).
struct Slot {
  bool active = false;
  int64_t epoch = 0, b = 0, step = 0;
};

// One round of the loop: every rank's next micro-batch, in lockstep with the other ranks' (their
// collectives pair up round by round).
struct Round {
  std::vector<Slot> slots;   // per local rank
  int64_t active_world = 0;  // ranks in the whole world with a batch this round
  int64_t buffer_src = 0;    // whose buffers DDP's broadcast takes
  bool syncs = true;         // the micro-batch all-reduces (outside no_sync())
  bool steps = true;         // the optimizer steps after it (no_sync's last, or the epoch's)
  bool syncs_buffers = true; // DDP broadcasts buffers before this forward
};

class Loop {
 public:
  Loop(const Config& cfg, const std::vector<TrainingRank*>& local, const LoopSync& sync, Replica* single)
      : cfg_(cfg), local_(local), sync_(sync), single_(single) {
    for (TrainingRank* r : local_) reducers_.push_back(r->reducer.get());
    out_.buckets_first = reducers_[0]->describe();
    has_buffers_ = !local_[0]->buffers().empty();  // DDP syncs none when the model has none
    const Footprint fp = footprint(cfg);
    step_work_ = 6.0 * static_cast<double>(fp.parameters * cfg.batch_size);
    update_work_ = 4.0 * static_cast<double>(fp.parameters);
  }

  // Runs `round`; false when training stopped on DDP's error.
  bool run(const Round& round);
  // Join's post-hook: the authoritative rank's parameters and buffers to every rank.
  void join_post_hook() {
    for (Reducer* r : reducers_) r->set_join_state(false, cfg_.world_size);
    sync_.sync_state(local_, authoritative_rank(cfg_), true);
  }
  TrainLog finish() {
    if (reducers_[0]->rebuilt()) out_.buckets_rebuilt = reducers_[0]->describe();
    if (!out_.error) {  // the final estimate_loss (a run that raised stops where torch's does)
      for (TrainingRank* r : local_) r->evaluate(cfg_.is_gpt() ? cfg_.steps : out_.optimizer_steps);
    }
    return std::move(out_);
  }
  TrainLog& out() { return out_; }

 private:
  void synchronise(const Round& round, const std::vector<size_t>& running);
  void step(const std::vector<size_t>& running);

  const Config& cfg_;
  const std::vector<TrainingRank*>& local_;
  const LoopSync& sync_;
  Replica* single_;
  std::vector<Reducer*> reducers_;
  TrainLog out_;
  bool has_buffers_ = false;
  double step_work_ = 0, update_work_ = 0;
  std::optional<UnfinishedReduction> pending_;
  int64_t syncs_ = 0;  // synchronised backwards so far
  size_t log_checked_ = 0;  // out_.log entries whose loss was looked at for NaN
  // The first NaN or inf of the step about to be taken (its losses, then the gradients), or after it (parameters).
  void find_nonfinite(const std::vector<size_t>& running, bool after_step);
  // --inject-nan: how many values of each rank's .grad (or, `what` naming them, parameters) are NaN or inf, as a
  // note: where the injected NaN has reached.
  void note_nonfinite(const std::vector<size_t>& running, int64_t step, const std::string& what);
};

void Loop::note_nonfinite(const std::vector<size_t>& running, int64_t step, const std::string& what) {
  const bool params = what.find("parameters") != std::string::npos;
  std::string counts;
  int64_t total = 0;
  for (size_t k : running) {
    int64_t bad = 0;
    total = 0;
    for (const Parameter* p : local_[k]->parameters()) {
      const Matrix& m = params ? p->value : p->grad;
      total += p->numel();
      if (params || p->has_grad) bad += (m.array() != m.array()).count() + (m.array().abs() == INFINITY).count();
    }
    counts += fmt::format("{}rank {}: {}", counts.empty() ? "" : ", ", local_[k]->rank, bad);
  }
  if (out_.notes.empty() || out_.notes.back().rfind("step " + std::to_string(step) + ": --inject-nan", 0) != 0) {
    out_.notes.push_back(fmt::format("step {}: --inject-nan put a NaN in rank {}'s batch; NaN or inf values of {}:",
                                     step, cfg_.inject_nan_rank, total));
  }
  out_.notes.back() += fmt::format("\n  {} ({})", what, counts);
}

void Loop::find_nonfinite(const std::vector<size_t>& running, bool after_step) {
  if (out_.nonfinite) return;
  const auto finite = [](const Matrix& m) { return m.allFinite(); };
  if (!after_step) {
    for (; log_checked_ < out_.log.size() && !out_.nonfinite; ++log_checked_) {
      const BatchLog& b = out_.log[log_checked_];
      if (!std::isfinite(b.loss)) out_.nonfinite = NonFinite{out_.optimizer_steps, b.rank, "the loss"};
    }
  }
  for (size_t k : running) {
    if (out_.nonfinite) return;
    for (const Parameter* p : local_[k]->parameters()) {
      if (after_step ? finite(p->value) : (!p->has_grad || finite(p->grad))) continue;
      out_.nonfinite = NonFinite{out_.optimizer_steps, local_[k]->rank,
                                 after_step ? "'" + p->name + "' after optimizer.step()"
                                            : "'" + p->name + "'.grad after the all-reduce"};
      break;
    }
  }
}

bool Loop::run(const Round& round) {
  std::vector<size_t> running;  // local ranks with a batch
  for (size_t k = 0; k < local_.size(); ++k) {
    if (round.slots[k].active) running.push_back(k);
  }
  for (size_t k : running) {  // the GPT's estimate_loss, before a step's first micro-batch
    if (round.slots[k].b % cfg_.no_sync == 0) local_[k]->evaluate(round.slots[k].step);
  }
  if (pending_) {  // DDP's forward checks that the previous reduction finished, before the module runs
    const Slot& s = round.slots[running.empty() ? 0 : running[0]];
    pending_->step = s.step;
    pending_->micro = s.b % cfg_.no_sync;
    out_.error = pending_;
    return false;
  }
  if (sync_.at && !running.empty()) {
    const Slot& s = round.slots[running[0]];
    sync_.at(s.step, s.b % cfg_.no_sync);
  }
  if (has_buffers_ && round.syncs_buffers) sync_.sync_state(local_, round.buffer_src, false);
  std::vector<int64_t> union_idx;  // the single device's batch: the running ranks' concatenated
  if (single_) {
    for (size_t k : running) {
      const auto& idx = static_cast<Replica*>(local_[k])->batches[static_cast<size_t>(round.slots[k].b)];
      union_idx.insert(union_idx.end(), idx.begin(), idx.end());
    }
  }
  const size_t n = running.size() + (single_ ? 1 : 0);
  std::vector<float> losses(n);
  auto forward_backward = [&](size_t i) {
    if (i == running.size()) {
      losses[i] = single_->forward_backward(*single_->data, union_idx);
    } else {
      const Slot& s = round.slots[running[i]];
      losses[i] = local_[running[i]]->forward_backward(s.b, s.step);
    }
  };
  if (sync_.lockstep && running.size() > 1) {
    run_concurrently(n, forward_backward);
  } else {
    parallel_for(sync_.pool, n, step_work_, forward_backward);
  }
  for (size_t i = 0; i < running.size(); ++i) {
    const Slot& s = round.slots[running[i]];
    const auto* rep = dynamic_cast<const Replica*>(local_[running[i]]);
    const int64_t bs = rep ? static_cast<int64_t>(rep->batches[static_cast<size_t>(s.b)].size()) : cfg_.batch_size;
    out_.log.push_back({s.epoch, local_[running[i]]->rank, bs, losses[i]});
  }
  if (single_) out_.single_losses.push_back(losses.back());
  if (round.syncs) synchronise(round, running);
  if (round.steps) step(running);
  return true;
}

void Loop::synchronise(const Round& round, const std::vector<size_t>& running) {
  const size_t P = local_[0]->parameters().size();
  std::vector<std::vector<bool>> unused(local_.size(), std::vector<bool>(P, false));
  for (size_t k : running) {  // the parameters this rank's backward did not reach
    std::vector<bool> used(P, false);
    const auto params = local_[k]->parameters();
    for (const Parameter* p : local_[k]->ready) {
      for (size_t i = 0; i < P; ++i) used[i] = used[i] || params[i] == p;
    }
    for (size_t i = 0; i < P; ++i) unused[k][i] = !used[i];
  }
  const int64_t step = round.slots[running.empty() ? 0 : running[0]].step;
  size_t reducible = reducers_[0]->num_buckets();
  if (cfg_.find_unused_parameters) {
    const std::vector<bool> global = sync_.global_unused(unused);
    for (size_t k = 0; k < local_.size(); ++k) reducers_[k]->set_unused(unused[k], global);
    std::string names;
    const auto params = local_[0]->parameters();
    for (size_t i = 0; i < global.size(); ++i) {
      if (global[i]) names += (names.empty() ? "" : ", ") + params[i]->name;
    }
    if (!names.empty()) {
      out_.notes.push_back(fmt::format(
          "step {}: no rank used {}: find_unused_parameters marked it ready before the backward (its bucket "
          "slot is zeros) and left its .grad as it was: {}",
          step, names,
          cfg_.zero_grad_set_to_none
              ? (cfg_.optimizer == OptimizerKind::adamw ? "None (zero_grad(set_to_none=True)), so AdamW skips it: no decay"
                                                        : "None (zero_grad(set_to_none=True)), so the optimizer skips it")
              : (cfg_.optimizer == OptimizerKind::adamw
                     ? "zeros (zero_grad(set_to_none=False)), so AdamW still decays it"
                     : "zeros (zero_grad(set_to_none=False)), so the optimizer still steps it (momentum, Adam's "
                       "moments)")));
    }
  } else if (std::find(unused[0].begin(), unused[0].end(), true) != unused[0].end()) {
    // Buckets are all-reduced in order as they fill: those before the first one still waiting for a grad
    // are; the rest never are. The next training forward raises.
    UnfinishedReduction e{step, 0, {}, {}};
    const auto params = local_[0]->parameters();
    for (size_t i = 0; i < P; ++i) {
      if (unused[0][i]) {
        e.indices.push_back(i);
        e.params.push_back(params[i]->name);
      }
    }
    pending_ = e;
    reducible = 0;
    while (reducible < reducers_[0]->num_buckets()) {
      bool complete = true;
      for (size_t i : reducers_[0]->bucket(reducible).params) complete = complete && !unused[0][i];
      if (!complete) break;
      ++reducible;
    }
  }
  // The synchronised backward: a joined rank's all-reduces are zeros, and it does not step.
  for (size_t k = 0; k < local_.size(); ++k) {
    reducers_[k]->set_join_state(!round.slots[k].active,
                                 cfg_.join_divide_active ? round.active_world : cfg_.world_size);
  }
  const bool injected = cfg_.inject_nan_step == step && cfg_.inject_nan_rank >= 0;
  if (injected) note_nonfinite(running, step, "before the all-reduce, the local .grad");
  std::vector<HookReport> reports = sync_.allreduce(reducers_, reducible);
  if (injected) note_nonfinite(running, step, "after it, .grad");
  if (reducers_[0]->comm_hook()) out_.hook_reports.push_back(std::move(reports));
  // 1.13 rebuilds buckets after the first iteration unless find_unused_parameters (without static_graph);
  // find_unused_parameters (static_graph) marks the unused ready first, before autograd's hooks. Under
  // static_graph the rebuild comes one iteration later: torch's _has_rebuilt_buckets after the forwards of
  // iterations 0-3 is F,T,T,T by default and F,F,T,T with static_graph=True (tests/ddp_sim_test.cc,
  // LiveStaticGraphRebuildsAnIterationLater), so iteration 1 still all-reduces in iteration 0's layout.
  const bool rebuilds = !cfg_.find_unused_parameters || cfg_.static_graph;
  ++syncs_;
  if (rebuilds && !reducers_[0]->rebuilt() && syncs_ >= (cfg_.static_graph ? 2 : 1)) {
    for (size_t k : running) {
      std::vector<Parameter*> order;
      const auto params = local_[k]->parameters();
      for (size_t i = 0; i < P; ++i) {
        if (unused[k][i]) order.push_back(params[i]);
      }
      order.insert(order.end(), local_[k]->ready.begin(), local_[k]->ready.end());
      reducers_[k]->finish_sync(order);
    }
  }
}

void Loop::step(const std::vector<size_t>& running) {
  find_nonfinite(running, false);
  const size_t n = running.size() + (single_ ? 1 : 0);
  parallel_for(sync_.pool, n, update_work_, [&](size_t i) {
    TrainingRank& r = i == running.size() ? static_cast<TrainingRank&>(*single_) : *local_[running[i]];
    if (cfg_.clip_grad_norm > 0) r.clip_norms.push_back(clip_grad_norm_(r.parameters(), cfg_.clip_grad_norm));
    r.optimizer->step();
    r.optimizer->zero_grad(cfg_.zero_grad_set_to_none);
    if (cfg_.zero_grad_set_to_none && r.reducer) r.reducer->grads_set_to_none();
  });
  if (sync_.after_step) sync_.after_step(local_);
  if (cfg_.inject_nan_rank >= 0 && cfg_.inject_nan_step == out_.optimizer_steps) {
    note_nonfinite(running, out_.optimizer_steps, "after optimizer.step(), the parameters");
  }
  find_nonfinite(running, true);
  ++out_.optimizer_steps;
}

// The optimizer step micro-batch b of `epoch` belongs to, counted over the run.
int64_t step_of(const Config& cfg, int64_t epoch, int64_t b, int64_t nb) {
  const int64_t per_epoch = (nb + cfg.no_sync - 1) / cfg.no_sync;
  return epoch * per_epoch + b / cfg.no_sync;
}

// One Join per epoch (or none): every rank at batch b of the same epoch in each round.
void run_by_epoch(const Config& cfg, const std::vector<TrainingRank*>& local, const LoopSync& sync, Loop& loop) {
  Progress shown("batch", sync.progress ? cfg.epoch_count() * cfg.batches_per_epoch() : 0);
  int64_t done = 0;
  bool previous_synced = true;
  for (int64_t epoch = 0; epoch < cfg.epoch_count(); ++epoch) {
    int64_t nb = 0;
    loop.out().sampler_indices.emplace_back();
    for (TrainingRank* r : local) {
      nb = r->begin_epoch(epoch);  // DistributedSampler gives every rank as many samples
      if (auto* rep = dynamic_cast<Replica*>(r)) loop.out().sampler_indices.back().push_back(rep->epoch_indices);
    }
    for (int64_t b = 0; b < nb; ++b) {
      Round round;
      round.active_world = active_ranks(cfg, b);
      round.buffer_src = buffer_source(cfg, b);
      round.syncs = is_sync_batch(cfg, static_cast<size_t>(b), static_cast<size_t>(nb));
      round.steps = is_step_batch(cfg, static_cast<size_t>(b), static_cast<size_t>(nb));
      // DDP's buffer broadcast (broadcast_buffers=True): before a training forward when the forward before it
      // synchronised gradients, or it is the first (torch's require_forward_param_sync).
      round.syncs_buffers = cfg.broadcast_buffers && previous_synced;
      previous_synced = round.syncs;
      for (TrainingRank* r : local) {
        round.slots.push_back({b < rank_batches(cfg, r->rank), epoch, b, step_of(cfg, epoch, b, nb)});
      }
      if (round.active_world < cfg.world_size && !cfg.join) {  // PyTorch's ranks would block in the next all-reduce
        const std::string line = no_join_line(cfg, epoch, b, *local[0]->reducer);
        const bool none_running = std::none_of(round.slots.begin(), round.slots.end(), [](const Slot& s) { return s.active; });
        if (none_running && sync.out_of_batches) sync.out_of_batches(line);
        const bool all_running = std::all_of(round.slots.begin(), round.slots.end(), [](const Slot& s) { return s.active; });
        if (all_running) {  // a real rank that has the batch: its all-reduce fails
          try {
            if (sync.at) sync.at(round.slots[0].step, b % cfg.no_sync);
            for (TrainingRank* r : local) r->forward_backward(b, round.slots[0].step);
            std::vector<Reducer*> reducers;
            for (TrainingRank* r : local) reducers.push_back(r->reducer.get());
            sync.allreduce(reducers, SIZE_MAX);
          } catch (const std::exception& e) {
            throw RunError(line + "; here: " + e.what());
          }
        }
        throw RunError(line);
      }
      if (!loop.run(round)) return;
      shown.advance(++done);
    }
    if (cfg.join) loop.join_post_hook();
  }
}

// One Join around all epochs (--join-scope run, --no-sync 1): each rank goes through its epochs at its own
// pace, so round k is each rank's k-th batch of the run; a rank out of batches in epoch e has already
// begun epoch e + 1, and the ranks' all-reduces pair across epochs.
void run_as_one_join(const Config& cfg, const std::vector<TrainingRank*>& local, const LoopSync& sync, Loop& loop) {
  const int64_t E = cfg.epoch_count();
  int64_t longest = 0;
  for (int64_t r = 0; r < cfg.world_size; ++r) longest = std::max(longest, E * rank_batches(cfg, r));
  Progress shown("batch", sync.progress ? longest : 0);
  std::vector<int64_t> epoch_of(local.size(), -1), nb(local.size(), 0);
  for (int64_t k = 0; k < longest; ++k) {
    Round round;
    for (int64_t r = cfg.world_size - 1; r >= 0; --r) {
      if (k < E * rank_batches(cfg, r)) {
        round.active_world += 1;
        round.buffer_src = std::max(round.buffer_src, r);
      }
    }
    round.syncs_buffers = cfg.broadcast_buffers;
    for (size_t i = 0; i < local.size(); ++i) {
      const int64_t per = rank_batches(cfg, local[i]->rank);
      Slot s;
      s.active = k < E * per;
      if (s.active) {
        s.epoch = k / per;
        s.b = k % per;
        if (s.epoch != epoch_of[i]) {  // this rank's `for batch in loader` starts its next epoch
          epoch_of[i] = s.epoch;
          nb[i] = local[i]->begin_epoch(s.epoch);
          if (auto* rep = dynamic_cast<Replica*>(local[i])) {
            auto& idx = loop.out().sampler_indices;  // [epoch][local rank], whoever began the epoch first
            if (idx.size() <= static_cast<size_t>(s.epoch)) idx.resize(static_cast<size_t>(s.epoch) + 1);
            idx[static_cast<size_t>(s.epoch)].resize(local.size());
            idx[static_cast<size_t>(s.epoch)][i] = rep->epoch_indices;
          }
        }
        s.step = step_of(cfg, s.epoch, s.b, nb[i]);
      }
      round.slots.push_back(s);
    }
    if (!loop.run(round)) return;
    shown.advance(k + 1);
  }
  loop.join_post_hook();
}

}  // namespace

TrainLog run_training(const Config& cfg, const std::vector<TrainingRank*>& local, const LoopSync& sync,
                      Replica* single) {
  Loop loop(cfg, local, sync, single);
  if (cfg.join && cfg.join_scope == JoinScope::run) {
    run_as_one_join(cfg, local, sync, loop);
  } else {
    run_by_epoch(cfg, local, sync, loop);
  }
  return loop.finish();
}

}  // namespace ddplab::ddp
