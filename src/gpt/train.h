// nanoGPT's train.py under DDP, one rank at a time (GptRank) and all ranks in one process (simulate_gpt):
// one manual_seed per rank before the model, get_batch from that generator, gradient accumulation with
// no_sync, clip_grad_norm_ after the all-reduce, AdamW with nanoGPT's two parameter groups, and DDP's
// find_unused_parameters / static_graph / gradient_as_bucket_view arithmetic (src/ddp/reducer.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "src/ddp/reducer.h"
#include "src/flags.h"
#include "src/gpt/model.h"
#include "src/optim.h"
#include "src/parallel.h"
#include "src/text_data.h"
#include "src/torch_rng.h"

namespace ddplab::gpt {

struct RunConfig {
  GptConfig model;  // vocab_size comes from the data
  std::string data = kTextDefaultPath;
  int64_t batch_size = 4;
  int64_t world_size = 2;
  uint64_t seed = 1337;
  bool seed_per_rank = false;  // rank r seeds seed + r (nanoGPT's seed_offset)
  int64_t steps = 4;
  int64_t no_sync = 1;  // micro-batches per optimizer step (gradient accumulation)
  int64_t eval_every = 0;
  int64_t eval_iters = 2;
  double lr = 1e-3, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95;
  double clip_grad_norm = 0.0;  // 0: no clipping
  bool find_unused_parameters = false;
  bool static_graph = false;
  bool gradient_as_bucket_view = false;
  bool zero_grad_set_to_none = true;  // --zero-grad none (nanoGPT's) | zeros (torch 1.13's default)
  double bucket_cap_mb = 25.0;
  ddp::CommHookOptions comm_hook;  // --comm-hook, --powersgd-*
  bool compare_hook = false;       // not a flag: ddp_sim's --explain (comm_hook.h's compared_to_builtin)
};

// The flags (names as in /notes: --n-layer, --n-embd, ...), their usage text, and parsing with the
// project's bad-input rule (UsageError naming the flag and its limit).
// Whether argv asks for --model gpt (ddp_sim and ddp_verify then read these flags instead of theirs).
bool wants_gpt(int argc, char** argv);
std::set<std::string> gpt_flag_names();
const char* gpt_usage();
RunConfig gpt_config_from_flags(const Flags& flags);
std::vector<std::string> gpt_to_args(const RunConfig& cfg);
// One replica's parameter count (the tied weight once; the aux head when there is one).
int64_t gpt_parameter_count(const GptConfig& model, int64_t vocab_size);
// Refuses (UsageError, one line with the numbers) a run whose parameters, optimizer state or activations
// times the world size pass src/limits.h's ceilings or this machine's free memory. The vocabulary is taken as
// 256 (a byte's most) until the data has been read. ranks_flag: the flag that set the world size.
void check_gpt_footprint(const RunConfig& cfg, const std::string& ranks_flag);
std::string describe(const RunConfig& cfg);

struct EvalLog {
  int64_t step;
  float train, val;  // estimate_loss()'s means
};

struct RankLog {
  std::vector<float> losses;  // every micro-step's loss, before the division by no_sync
  std::vector<EvalLog> evals;
  std::vector<float> clip_norms;  // clip_grad_norm_'s total norm per step
};

// DDP's "Expected to have finished reduction in the prior iteration" (find_unused_parameters=False and a
// parameter that got no grad): raised at the next training forward, as torch 1.13 raises it.
struct UnfinishedReduction {
  int64_t step, micro;              // where the next forward was
  std::vector<std::string> params;  // the parameters that got no grad
  std::vector<size_t> indices;      // their indices in parameters()
};

class GptRank {
 public:
  // torch.manual_seed(seed or seed + rank), then the model. The caller broadcasts rank 0's parameters
  // (DDP's construction) before calling start().
  GptRank(const RunConfig& cfg, const TextData& data, int64_t rank);

  // DDP(model) done: the reducer and the optimizer, and the first get_batch('train').
  void start();
  // One micro-step of `step`: the training forward (loss recorded; the aux head used when the step says so),
  // the prefetch of the next batch, and the backward with d loss = 1/no_sync. `ready` holds the
  // gradient-ready order afterwards.
  void forward_backward(int64_t step);
  // After a synchronised backward: which parameters this rank's backward did not reach.
  std::vector<bool> unused() const;
  // clip (when asked), optimizer.step(), zero_grad.
  void optimizer_step();
  // estimate_loss(): eval_iters batches of each split from this rank's generator, in eval mode.
  void estimate_loss(int64_t step);

  const RunConfig& cfg;
  const TextData& data;
  int64_t rank;
  Generator gen;
  Gpt model;
  std::vector<Parameter*> params;
  std::vector<Parameter*> ready;
  std::unique_ptr<ddp::Reducer> reducer;
  std::unique_ptr<Optimizer> optimizer;
  Batch batch;
  RankLog log;
};

// How the ranks this process runs talk to the others: the simulator runs every rank and reduces in
// memory; a real rank runs one and uses its communicator. Both run the same loop (run_gpt).
struct GptSync {
  // find_unused_parameters: each local rank's unused flags -> the parameters no rank in the world used.
  std::function<std::vector<bool>(const std::vector<std::vector<bool>>& local)> global_unused;
  // All-reduce the first `num_buckets` buckets of the local ranks' reducers (prepare, sum, finalize; or
  // the registered comm hook: then its reports of rank 0's buckets come back).
  std::function<std::vector<ddp::HookReport>(const std::vector<ddp::Reducer*>& reducers, size_t num_buckets)> allreduce;
  // Where the local ranks' forward/backward and optimizer steps run side by side (null: one after the
  // other). Each rank writes only its own model, generator and log, so the bits do not depend on it.
  ThreadPool* pool = nullptr;
};

struct GptRunResult {
  std::string buckets_first, buckets_rebuilt;
  std::vector<std::string> notes;            // what DDP did with parameters that got no grad, step by step
  std::optional<UnfinishedReduction> error;  // set when training stopped on DDP's error
  std::vector<std::vector<ddp::HookReport>> hook_reports;  // --comm-hook: [synchronised step][bucket]
};

// nanoGPT's loop over `local` (already started, parameters broadcast): evaluations, micro-steps, the
// synchronised backward through `sync`, the bucket rebuild, clipping and the optimizer.
GptRunResult run_gpt(const RunConfig& cfg, const std::vector<GptRank*>& local, const GptSync& sync);

struct GptSimResult : GptRunResult {
  std::vector<std::unique_ptr<GptRank>> ranks;
};

// Every rank in this process, lockstep, the all-reduce as Gloo's ring computes it.
// `on_allreduce` (optional) is told of every synchronised backward and how many buckets it reduced.
GptSimResult simulate_gpt(const RunConfig& cfg, const TextData& data,
                          const std::function<void(size_t buckets_reduced)>& on_allreduce = nullptr);

// The message torch 1.13 raises (with TORCH_DISTRIBUTED_DEBUG=DETAIL's parameter names), and why.
std::string unfinished_reduction_message(const UnfinishedReduction& e);

}  // namespace ddplab::gpt
