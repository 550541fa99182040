// The simulator's one path for every model: simulate_ranks() runs any model's ranks in one process, lockstep,
// on the one training loop (loop.h). simulate() builds the sequential models' (the MLP, the CNN, a spec) and
// train_rank() is one real rank of ddp_verify, over its Communicator; the tiny GPT builds its ranks in
// src/gpt/train.h and runs them through simulate_ranks() too.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/comm/communicator.h"
#include "src/data/data.h"
#include "src/ddp/config.h"
#include "src/ddp/loop.h"
#include "src/ddp/reducer.h"
#include "src/ddp/replica.h"
#include "src/ddp/sim_sync.h"
#include "src/tensor/kernels.h"

namespace ddplab::ddp {

// The loop's log (sampler indices [epoch][rank], losses in (epoch, batch, rank) order, the buckets, hook
// reports, find_unused_parameters' notes, DDP's error), and the sequential models' replicas.
struct SimResult : TrainLog {
  std::vector<std::unique_ptr<Replica>> replicas;
  std::unique_ptr<Replica> single_device;  // one model on the union of the shards; its losses: single_losses
  // --dataset digits: each rank's accuracy on the test set after training (evaluated as DDP(model) in
  // eval mode evaluates: rank 0's buffers broadcast first), and the single device's.
  std::vector<int64_t> test_correct;  // of test_size
  int64_t single_device_test_correct = 0;
  int64_t test_size = 0;
};

struct SimHooks {
  // Called before every bucket all-reduce with the ranks' prepared buckets (sync = 0, 1, ...).
  InProcessSync::Before before_allreduce;
  // Called at every synchronised backward with how many buckets it reduced.
  std::function<void(size_t buckets_reduced)> on_allreduce;
  // Instead of DDP's bucket all-reduce: another gradient sync over the ranks' reducers (FSDP2's, fsdp_sync.h).
  std::function<std::vector<HookReport>(const std::vector<Reducer*>&, size_t)> replace_allreduce;
  // Called after every synchronised backward's all-reduce, the ranks' averaged .grad in their reducers' params.
  std::function<void(const std::vector<Reducer*>&)> after_allreduce;
};

// Every rank of `local` (any model), in this process: DDP(model) (rank 0's parameters and buffers copied to
// every rank, the Reducer), each rank's start(), then the one loop, the all-reduce as cfg.allreduce orders it,
// on `pool`. `single` (sequential models' --compare-single-device) trains on the union of the ranks' batches;
// `lockstep` when the ranks meet inside forward and backward (SyncBatchNorm); `progress`: the loop's
// per-batch lines.
TrainLog simulate_ranks(const Config& cfg, const std::vector<TrainingRank*>& local, ThreadPool* pool,
                        const SimHooks& hooks, bool progress, Replica* single = nullptr, bool lockstep = false);

// The replicas keep a reference to `cfg`: it must outlive the result. Runs on cfg.threads threads.
SimResult simulate(const Config& cfg, bool single_device, const SimHooks& hooks = {});

// One real rank of a multi-process run: the same loop as simulate(), with `comm` carrying the
// broadcast at construction and every bucket's all-reduce.
struct RankResult {
  std::unique_ptr<Replica> replica;
  std::vector<std::vector<int64_t>> sampler_indices;  // [epoch]
  std::vector<BatchLog> log;
  int64_t optimizer_steps = 0;
  int64_t test_correct = -1;  // --dataset digits only
  int64_t test_size = 0;
  double train_seconds = 0;   // wall time of the training loop only (no data, model or connection setup)
  std::vector<std::vector<HookReport>> hook_reports;  // --comm-hook: [synchronised step][bucket]
  std::optional<UnfinishedReduction> error;           // training stopped on DDP's error (unused parameters)
};
// One real rank of any model over `comm`: DDP(model) (rank 0's parameters and buffers broadcast, the Reducer,
// the backend's own averaging where it has one), the rank's start(), then the one loop with every collective
// through `comm`. *seconds: the loop's wall time. `on_allreduce` (optional) is told of every synchronised
// backward and how many buckets it reduced. train_rank() and the GPT's real ranks both come through here.
TrainLog train_over(const Config& cfg, comm::Communicator& comm, TrainingRank& rank, bool progress, double* seconds,
                    const std::function<void(size_t buckets_reduced)>& on_allreduce = nullptr);
// `kernels` run Linear: the backend's (dist::Rank::kernels; the NCCL backend runs Linear on the GPU).
RankResult train_rank(const Config& cfg, comm::Communicator& comm, const LinearKernels& kernels);
// With the CPU's kernels, cpu_kernels(cfg.kernels).
RankResult train_rank(const Config& cfg, comm::Communicator& comm);

// "[rank0] Epoch: 001/003 | Batch size 002 | Loss: 0.75"
std::string progress_line(const BatchLog& l, int64_t epochs);

}  // namespace ddplab::ddp
