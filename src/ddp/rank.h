// One rank of a DDP run, whatever its model: what the one training loop (loop.h) asks of it. The nn.Sequential
// models' Replica (replica.h: DistributedSampler epochs) and the tiny GPT's GptRank (src/gpt/train.h:
// nanoGPT's get_batch steps) implement it; the loop writes DDP's side (buckets, all-reduce, no_sync, Join,
// ZeRO, clipping) once for both.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "src/ddp/reducer.h"
#include "src/train/optim.h"
#include "src/tensor/tensor.h"
#include "src/data/torch_rng.h"

namespace ddplab::ddp {

class TrainingRank {
 public:
  explicit TrainingRank(int64_t r) : rank(r) {}
  TrainingRank(int64_t r, const Generator& g) : rank(r), gen(g) {}
  virtual ~TrainingRank() = default;
  TrainingRank(const TrainingRank&) = delete;
  TrainingRank& operator=(const TrainingRank&) = delete;

  // model.parameters() (the Reducer's order) and model.buffers().
  virtual std::vector<Parameter*> parameters() = 0;
  virtual std::vector<Buffer*> buffers() = 0;

  // After DDP(model) (the broadcast, the Reducer), before the first step: what a model sets up once its
  // parameters are rank 0's (the GPT: its optimizer and first get_batch). Nothing for the sequential models.
  virtual void start() {}

  // The data seam. begin_epoch: this rank's micro-batches of `epoch` before --uneven (the sequential models:
  // set_epoch and the DataLoader's iter; the GPT: its one epoch of steps x no_sync get_batch draws).
  virtual int64_t begin_epoch(int64_t epoch) = 0;
  // Micro-batch b of the current epoch: forward, loss, backward (grads accumulate; `ready` gets the
  // AccumulateGrad order). `step` is the optimizer step it belongs to, counted from 0 over the run.
  virtual float forward_backward(int64_t b, int64_t step) = 0;
  // Before optimizer step `step`'s first micro-batch, and once with step = the number of steps after the
  // last: the GPT's estimate_loss every eval_every steps. Evaluation draws from this rank's generator only.
  virtual void evaluate(int64_t /*step*/) {}

  int64_t rank;
  Generator gen;  // this rank's "global" generator: model init, data draws, Dropout masks
  std::vector<Parameter*> ready;  // the last backward's gradient-ready order (the Reducer's rebuild)
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<Reducer> reducer;  // created after DDP's broadcast (init_ddp)
  std::vector<float> clip_norms;     // clip_grad_norm_'s total norm per optimizer step, when clipping
};

}  // namespace ddplab::ddp
