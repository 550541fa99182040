// nanoGPT's train.py under DDP: GptRank is one rank (torch.manual_seed before the model, get_batch from that
// generator, estimate_loss, AdamW with nanoGPT's two parameter groups or ZeroRedundancyOptimizer over them) and
// plugs into the one training loop (src/ddp/loop.h) as its data seam of get_batch steps: no_sync accumulation,
// clip_grad_norm_, find_unused_parameters, comm hooks, ZeRO and Join come from there, as for every model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/ddp/config.h"
#include "src/ddp/loop.h"
#include "src/ddp/trainer.h"
#include "src/gpt/model.h"
#include "src/data/text_data.h"

namespace ddplab::gpt {

// --model gpt's run is a ddp::Config like every model's (one flag table): its shape in cfg.gpt.
using RunConfig = ddp::Config;
using ddp::UnfinishedReduction;
using ddp::unfinished_reduction_message;

struct EvalLog {
  int64_t step;
  float train, val;  // estimate_loss()'s means
};

struct RankLog {
  std::vector<float> losses;  // every micro-step's loss, before the division by no_sync
  std::vector<EvalLog> evals;
  std::vector<float> clip_norms;  // clip_grad_norm_'s total norm per step
};

class GptRank : public ddp::TrainingRank {
 public:
  // torch.manual_seed(seed or seed + rank), then the model. The caller broadcasts rank 0's parameters
  // (DDP's construction: ddp::init_ddp) before calling start().
  GptRank(const RunConfig& cfg, const TextData& data, int64_t rank);

  // The optimizer (AdamW over nanoGPT's two groups; ZeroRedundancyOptimizer over them with --zero) and the
  // first get_batch('train').
  void start() override;

  std::vector<Parameter*> parameters() override { return params; }
  std::vector<Buffer*> buffers() override { return {}; }  // the causal masks: equal on every rank, never broadcast
  int64_t begin_epoch(int64_t epoch) override;
  // One micro-step of `step`: the training forward (loss recorded; the aux head used when the step says so),
  // the prefetch of the next batch, and the backward with d loss = 1/no_sync.
  float forward_backward(int64_t b, int64_t step) override;
  // estimate_loss() every eval_every steps and after the last: eval_iters batches of each split from this
  // rank's generator, in eval mode.
  void evaluate(int64_t step) override;

  const RunConfig& cfg;
  const TextData& data;
  Gpt model;
  std::vector<Parameter*> params;
  Batch batch;
  RankLog log;
};

struct GptSimResult : ddp::TrainLog {
  std::vector<std::unique_ptr<GptRank>> ranks;
};

// The GPT's ranks, each seeded and built as train.py builds it, through the simulator's one path
// (ddp::simulate_ranks): every rank in this process, lockstep, the all-reduce as Gloo's ring computes it (or
// cfg.allreduce), on cfg.threads threads.
GptSimResult simulate(const RunConfig& cfg, const TextData& data, const ddp::SimHooks& hooks = {});

}  // namespace ddplab::gpt
