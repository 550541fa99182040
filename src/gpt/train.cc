#include "src/gpt/train.h"

#include <algorithm>

#include "src/base/parallel.h"
#include "src/ddp/zero.h"
#include "src/tensor/torch_sum.h"

namespace ddplab::gpt {

GptRank::GptRank(const RunConfig& c, const TextData& d, int64_t r)
    // nanoGPT's torch.manual_seed(1337 + seed_offset) comes before the model.
    : TrainingRank(r, Generator(c.seed_per_rank ? c.seed + static_cast<uint64_t>(r) : c.seed)),
      cfg(c),
      data(d),
      model(c.gpt, gen),
      params(model.parameters()) {}

void GptRank::start() {
  // nanoGPT's configure_optimizers: weight decay on every parameter of 2 or more dimensions (embeddings
  // included), none on biases and LayerNorm weights.
  AdamOptions o;
  o.lr = cfg.lr;
  o.beta1 = cfg.beta1;
  o.beta2 = cfg.beta2;
  o.eps = 1e-8;
  o.weight_decay = cfg.weight_decay;
  std::vector<AdamParamGroup> groups = weight_decay_groups(params, o);
  if (cfg.zero) {  // ZeroRedundancyOptimizer(groups, optimizer_class=AdamW): each rank steps its shard of each
    std::vector<std::vector<size_t>> indices;
    for (const AdamParamGroup& g : groups) {
      indices.emplace_back();
      for (const Parameter* p : g.params) {
        indices.back().push_back(static_cast<size_t>(std::find(params.begin(), params.end(), p) - params.begin()));
      }
    }
    optimizer = std::make_unique<ddp::ZeroRedundancyOptimizer>(
        params, indices, cfg.world_size, rank, [groups](std::vector<std::vector<Parameter*>> shard) {
          std::vector<AdamParamGroup> mine;
          for (size_t g = 0; g < shard.size(); ++g) mine.push_back({std::move(shard[g]), groups[g].options});
          return std::make_unique<AdamW>(std::move(mine));
        });
  } else {
    optimizer = std::make_unique<AdamW>(std::move(groups));
  }
  batch = data.get_batch(Split::kTrain, gen, cfg.batch_size, cfg.gpt.block_size);
}

int64_t GptRank::begin_epoch(int64_t /*epoch*/) { return cfg.steps * cfg.no_sync; }

float GptRank::forward_backward(int64_t /*b*/, int64_t step) {
  const bool use_aux = cfg.gpt.aux_head_every > 0 && step % cfg.gpt.aux_head_every == 0;
  model.train(true);
  const float loss = model.forward(batch.x, batch.y, cfg.batch_size, cfg.gpt.block_size, use_aux, gen);
  log.losses.push_back(loss);
  // train.py fetches the next batch between the forward and the backward.
  batch = data.get_batch(Split::kTrain, gen, cfg.batch_size, cfg.gpt.block_size);
  ready.clear();
  // loss / K: DivBackward hands the loss 1 / K (a float division).
  model.backward(cfg.micro_batch_grad(), ready);  // nanoGPT's loss / K (or, --no-sync-loss sum, loss)
  return loss;
}

void GptRank::evaluate(int64_t step) {
  if (cfg.eval_every <= 0 || (step % cfg.eval_every != 0 && step != cfg.steps)) return;
  model.train(false);
  EvalLog e{step, 0.0f, 0.0f};
  for (int split = 0; split < 2; ++split) {
    // losses = torch.zeros(eval_iters); losses[k] = loss.item(); losses.mean(): the cascade sum / n.
    std::vector<float> losses(static_cast<size_t>(cfg.eval_iters));
    for (int64_t k = 0; k < cfg.eval_iters; ++k) {
      const Batch b =
          data.get_batch(split == 0 ? Split::kTrain : Split::kVal, gen, cfg.batch_size, cfg.gpt.block_size);
      losses[static_cast<size_t>(k)] = model.forward(b.x, b.y, cfg.batch_size, cfg.gpt.block_size, false, gen);
    }
    float sum = 0.0f;
    torch_sum_dim0(losses.data(), &sum, cfg.eval_iters, 1);
    (split == 0 ? e.train : e.val) = sum / static_cast<float>(cfg.eval_iters);
  }
  log.evals.push_back(e);
  model.train(true);
}

GptSimResult simulate(const RunConfig& cfg, const TextData& data, const ddp::SimHooks& hooks) {
  GptSimResult out;
  std::vector<ddp::TrainingRank*> local;
  for (int64_t r = 0; r < cfg.world_size; ++r) {
    out.ranks.push_back(std::make_unique<GptRank>(cfg, data, r));
    local.push_back(out.ranks.back().get());
  }
  // DDP(model): every rank takes rank 0's parameters (the causal masks are equal anyway, and no buffer).
  ThreadPool pool(cfg.threads > 0 ? cfg.threads : available_cores());
  static_cast<ddp::TrainLog&>(out) = ddp::simulate_ranks(cfg, local, &pool, hooks, false);
  return out;
}

}  // namespace ddplab::gpt
