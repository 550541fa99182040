// The one training loop of DDP, for every model and wherever its ranks run: the simulator runs every rank in
// one process and reduces in memory (sim_sync.h), a real rank runs one and talks over its Communicator
// (rank_sync.h). Per synchronised micro-batch: DDP's buffer broadcast, forward and backward on every rank
// that has data, find_unused_parameters, the bucketed all-reduce (or the comm hook), the bucket rebuild,
// clip_grad_norm_, optimizer.step() and zero_grad, ZeroRedundancyOptimizer's broadcast; around it no_sync
// accumulation, uneven inputs and torch.distributed.algorithms.Join (one per epoch, or one around the run).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "src/ddp/comm_hook.h"
#include "src/ddp/config.h"
#include "src/ddp/rank.h"
#include "src/base/parallel.h"

namespace ddplab::ddp {

struct Replica;

// DDP's "Expected to have finished reduction in the prior iteration" (find_unused_parameters=False and a
// parameter that got no grad): raised at the next training forward, as torch 1.13 raises it.
struct UnfinishedReduction {
  int64_t step, micro;              // where the next forward was
  std::vector<std::string> params;  // the parameters that got no grad
  std::vector<size_t> indices;      // their indices in parameters()
};
// The message torch 1.13 raises (with the parameter names TORCH_DISTRIBUTED_DEBUG=INFO or DETAIL adds), and why.
std::string unfinished_reduction_message(const UnfinishedReduction& e);

// How the ranks this process runs meet the others'. Every member but allreduce may be empty when the run
// cannot need it.
struct LoopSync {
  // All-reduce the first `num_buckets` buckets of the local ranks' reducers (a joined rank's Reducer gives
  // zeros: Join's shadow all-reduce). Returns rank 0's hook reports, one per bucket, when a hook runs.
  std::function<std::vector<HookReport>(const std::vector<Reducer*>&, size_t num_buckets)> allreduce;
  // find_unused_parameters: each local rank's unused flags -> the parameters no rank in the world used.
  std::function<std::vector<bool>(const std::vector<std::vector<bool>>&)> global_unused;
  // DDP's buffer broadcast from rank `src`; with_params: Join's final model broadcast (parameters, then buffers).
  std::function<void(const std::vector<TrainingRank*>&, int64_t src, bool with_params)> sync_state;
  // Once every local rank has stepped (ZeroRedundancyOptimizer._sync_params, --zero).
  std::function<void(const std::vector<TrainingRank*>&)> after_step;
  // --uneven without --join, on a real rank that ran out: it must not pair a collective with the others'.
  std::function<void(const std::string& line)> out_of_batches;
  // Told where the loop is before each round's collectives: the optimizer step (from 0) and the micro-batch
  // within it. A real rank's communicator names them in its errors (Communicator::context).
  std::function<void(int64_t step, int64_t micro)> at;
  // Where the local ranks compute side by side between collectives (null: one after the other). Each
  // writes only its own model, generator and log, so the bits do not depend on it.
  ThreadPool* pool = nullptr;
  // The local ranks meet inside forward and backward (SyncBatchNorm's collectives): each runs on its own
  // thread, whatever the pool.
  bool lockstep = false;
  bool progress = false;  // show micro-batches done on a terminal (src/base/progress.h)
};

// Which micro-batches end an optimizer step: every no_sync-th one and the last of the epoch.
inline bool is_step_batch(const Config& cfg, size_t b, size_t num_batches) {
  return (b + 1) % static_cast<size_t>(cfg.no_sync) == 0 || b + 1 == num_batches;
}

// Which micro-batches all-reduce (run outside no_sync()): the step's last (--sync-on last), its first, or none.
inline bool is_sync_batch(const Config& cfg, size_t b, size_t num_batches) {
  switch (cfg.sync_on) {
    case SyncOn::first: return b % static_cast<size_t>(cfg.no_sync) == 0;
    case SyncOn::never: return false;
    case SyncOn::last: break;
  }
  return is_step_batch(cfg, b, num_batches);
}

struct BatchLog {
  int64_t epoch, rank, batch_size;
  float loss;
};

// Where the run's numbers first became NaN or inf: the optimizer step (0-based) during which it happened, the rank,
// and what: "the loss", "'<name>'.grad after the all-reduce" or "'<name>' after optimizer.step()".
struct NonFinite {
  int64_t step = 0, rank = 0;
  std::string what;
};

struct TrainLog {
  std::vector<std::vector<std::vector<int64_t>>> sampler_indices;  // [epoch][local rank] (sequential models)
  std::vector<BatchLog> log;                                       // in (round, local rank) order
  int64_t optimizer_steps = 0;                                     // synchronised steps of the run
  std::vector<float> single_losses;                                // `single`'s loss per batch
  std::string buckets_first, buckets_rebuilt;
  std::vector<std::string> notes;            // what DDP did with parameters that got no grad, step by step
  std::optional<UnfinishedReduction> error;  // set when training stopped on DDP's error
  std::vector<std::vector<HookReport>> hook_reports;  // --comm-hook: [synchronised step][bucket]
  std::optional<NonFinite> nonfinite;                  // the first NaN or inf, when the run diverged
};

// DDP(model) for one rank: with cfg.broadcast, `broadcast(rank)` gives it rank 0's parameters and buffers;
// then its Reducer, with cfg.comm_hook registered (compared with the built-in averaging when cfg.compare_hook).
void init_ddp(const Config& cfg, TrainingRank& rank, const std::function<void(TrainingRank&)>& broadcast);
// --hand-sync's layout over `params` (model order), kept for the whole run: an all-reduce per parameter; one
// flat buffer of every parameter in model order (torch.cat); or buckets in reverse model order closed once they
// reach bucket_cap_mb (DDP's own rule, without its rebuild nor its 1 MiB first bucket).
std::vector<std::vector<size_t>> hand_sync_layout(const Config& cfg, const std::vector<Parameter*>& params);

// Trains `local` (DDP(model) done: init_ddp) for the run cfg describes. `single` (the simulator's
// --compare-single-device, sequential models only) trains on the union of the local ranks' batches.
TrainLog run_training(const Config& cfg, const std::vector<TrainingRank*>& local, const LoopSync& sync,
                      Replica* single = nullptr);

}  // namespace ddplab::ddp
