// How the simulator's ranks meet, all in one process: the bucketed all-reduce in memory with the chosen
// algorithm's order (Gloo's ring by default), a comm hook on a thread per rank, DDP's broadcasts and
// ZeroRedundancyOptimizer's as copies of the source rank's bits. The LoopSync for run_training (loop.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "src/collective/allreduce.h"
#include "src/collective/measured.h"
#include "src/ddp/config.h"
#include "src/ddp/hooked_sync.h"
#include "src/ddp/loop.h"
#include "src/base/parallel.h"

namespace ddplab::ddp {

// The simulator's synchronised backward over every rank's Reducer: bucket by bucket, prepare (grad *
// 1/ws), all-reduce with `algorithm`, finalize; block by block in a ~1 MiB buffer per thread, so memory
// is parameters + gradients per rank. With a hook (--explain), whole buckets in one workspace of
// world_size x the largest bucket, kept across steps.
class InProcessAllreduce {
 public:
  using Hook = std::function<void(size_t bucket, const std::vector<float*>& bufs, size_t n)>;
  // With a pool, the ranks' buckets are prepared and finalized side by side and the all-reduce is split
  // into spans of elements (collective::Span: the same bits).
  // Only the first `num_buckets` buckets when fewer: DDP reduces buckets in order as they fill, and stops
  // at one that waits for a grad that never comes (find_unused_parameters=False with an unused parameter).
  void run(const std::vector<Reducer*>& reducers, collective::Algorithm algorithm, const Hook& before = nullptr,
           ThreadPool* pool = nullptr, size_t num_buckets = SIZE_MAX);

  // ddp_check's measured orders: a bucket of n elements for which this returns an order is summed in that
  // order (collective/measured.h) instead of `algorithm`'s.
  std::function<const collective::MeasuredOrder*(size_t n)> measured;

 private:
  std::vector<std::vector<float>> workspace_;
};

// Every rank of the world in this process. Lives as long as the LoopSync it makes.
class InProcessSync {
 public:
  // `before(sync, bucket, bufs, n)` (optional) sees every rank's prepared bucket before its all-reduce
  // (sync = 0, 1, ...: --explain, --report).
  using Before = std::function<void(int64_t sync, size_t bucket, const std::vector<float*>& bufs, size_t n)>;
  InProcessSync(const Config& cfg, ThreadPool* pool, Before before = nullptr);
  LoopSync sync(bool progress);

 private:
  const Config& cfg_;
  ThreadPool* pool_;
  Before before_;
  int64_t syncs_ = 0;
  InProcessAllreduce allreduce_;
  std::unique_ptr<HookedAllreduce> hooked_;  // a comm hook runs per rank, each on its own thread
};

// The simulator's broadcasts: every rank but `from` takes its parameters' / buffers' bits.
void copy_parameters(const std::vector<TrainingRank*>& ranks, const TrainingRank& from);
void copy_buffers(const std::vector<TrainingRank*>& ranks, const TrainingRank& from);

}  // namespace ddplab::ddp
