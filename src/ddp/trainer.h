// The sequential models' runs (the MLP, the CNN, a spec), on the one training loop (loop.h): simulate() runs
// every rank in one process; train_rank() is one real rank of ddp_verify, over its Communicator. The tiny GPT's
// are src/gpt/train.h, on the same loop.
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

struct SimResult {
  std::vector<std::unique_ptr<Replica>> replicas;
  std::vector<std::vector<std::vector<int64_t>>> sampler_indices;  // [epoch][rank]
  std::vector<BatchLog> log;                                       // in (epoch, batch, rank) order
  std::unique_ptr<Replica> single_device;                          // one model on the union of the shards
  std::vector<float> single_device_losses;                         // its loss per batch (--report)
  std::string buckets_first, buckets_rebuilt;                      // rebuilt: empty when never rebuilt
  int64_t optimizer_steps = 0;
  // --dataset digits: each rank's accuracy on the test set after training (evaluated as DDP(model) in
  // eval mode evaluates: rank 0's buffers broadcast first), and the single device's.
  std::vector<int64_t> test_correct;  // of test_size
  int64_t single_device_test_correct = 0;
  int64_t test_size = 0;
  std::vector<std::vector<HookReport>> hook_reports;  // --comm-hook: rank 0's, [synchronised step][bucket]
  std::vector<std::string> notes;                     // find_unused_parameters' notes
  std::optional<UnfinishedReduction> error;           // training stopped on DDP's error (unused parameters)
};

struct SimHooks {
  // Called before every bucket all-reduce with the ranks' prepared buckets (sync = 0, 1, ...).
  InProcessSync::Before before_allreduce;
};

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
// `kernels` run Linear: the backend's (dist::Rank::kernels; the NCCL backend runs Linear on the GPU).
RankResult train_rank(const Config& cfg, comm::Communicator& comm, const LinearKernels& kernels);
// With the CPU's kernels, cpu_kernels(cfg.kernels).
RankResult train_rank(const Config& cfg, comm::Communicator& comm);

// "[rank0] Epoch: 001/003 | Batch size 002 | Loss: 0.75"
std::string progress_line(const BatchLog& l, int64_t epochs);

}  // namespace ddplab::ddp
