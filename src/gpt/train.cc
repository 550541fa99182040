#include "src/gpt/train.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "src/clip_grad.h"
#include "src/ddp/hooked_sync.h"
#include "src/ddp/trainer.h"
#include "src/torch_sum.h"

namespace ddplab::gpt {

GptRank::GptRank(const RunConfig& c, const TextData& d, int64_t r)
    : cfg(c),
      data(d),
      rank(r),
      gen(c.seed_per_rank ? c.seed + static_cast<uint64_t>(r) : c.seed),
      model(c.model, gen),
      params(model.parameters()) {}

void GptRank::start() {
  reducer = std::make_unique<ddp::Reducer>(params, cfg.world_size, cfg.bucket_cap_mb, ddp::Average::predivide);
  reducer->set_gradient_as_bucket_view(cfg.gradient_as_bucket_view);
  if (auto hook = ddp::make_comm_hook(cfg.comm_hook)) {
    reducer->register_comm_hook(cfg.compare_hook ? ddp::compared_to_builtin(std::move(hook)) : std::move(hook));
  }
  // nanoGPT's configure_optimizers: weight decay on every parameter of 2 or more dimensions (embeddings
  // included), none on biases and LayerNorm weights.
  AdamOptions o;
  o.lr = cfg.lr;
  o.beta1 = cfg.beta1;
  o.beta2 = cfg.beta2;
  o.eps = 1e-8;
  o.weight_decay = cfg.weight_decay;
  optimizer = std::make_unique<AdamW>(weight_decay_groups(params, o));
  batch = data.get_batch(Split::kTrain, gen, cfg.batch_size, cfg.model.block_size);
}

void GptRank::forward_backward(int64_t step) {
  const bool use_aux = cfg.model.aux_head_every > 0 && step % cfg.model.aux_head_every == 0;
  model.train(true);
  const float loss = model.forward(batch.x, batch.y, cfg.batch_size, cfg.model.block_size, use_aux, gen);
  log.losses.push_back(loss);
  // train.py fetches the next batch between the forward and the backward.
  batch = data.get_batch(Split::kTrain, gen, cfg.batch_size, cfg.model.block_size);
  ready.clear();
  // loss / K: DivBackward hands the loss 1 / K (a float division).
  model.backward(1.0f / static_cast<float>(cfg.no_sync), ready);
}

std::vector<bool> GptRank::unused() const {
  std::vector<bool> used(params.size(), false);
  for (const Parameter* p : ready) {
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i] == p) used[i] = true;
    }
  }
  std::vector<bool> out(params.size());
  for (size_t i = 0; i < params.size(); ++i) out[i] = !used[i];
  return out;
}

void GptRank::optimizer_step() {
  if (cfg.clip_grad_norm > 0) log.clip_norms.push_back(clip_grad_norm_(params, cfg.clip_grad_norm));
  optimizer->step();
  optimizer->zero_grad(cfg.zero_grad_set_to_none);
  if (cfg.zero_grad_set_to_none) reducer->grads_set_to_none();
}

void GptRank::estimate_loss(int64_t step) {
  model.train(false);
  EvalLog e{step, 0.0f, 0.0f};
  for (int split = 0; split < 2; ++split) {
    // losses = torch.zeros(eval_iters); losses[k] = loss.item(); losses.mean(): the cascade sum / n.
    std::vector<float> losses(static_cast<size_t>(cfg.eval_iters));
    for (int64_t k = 0; k < cfg.eval_iters; ++k) {
      const Batch b =
          data.get_batch(split == 0 ? Split::kTrain : Split::kVal, gen, cfg.batch_size, cfg.model.block_size);
      losses[static_cast<size_t>(k)] = model.forward(b.x, b.y, cfg.batch_size, cfg.model.block_size, false, gen);
    }
    float sum = 0.0f;
    torch_sum_dim0(losses.data(), &sum, cfg.eval_iters, 1);
    (split == 0 ? e.train : e.val) = sum / static_cast<float>(cfg.eval_iters);
  }
  log.evals.push_back(e);
  model.train(true);
}

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
      "Parameters which did not receive grad for rank 0: {}. Why: with find_unused_parameters=False every "
      "bucket waits for every parameter's grad, so the previous step's reduction never finished; "
      "--find-unused-parameters true marks them ready at the start of the backward.",
      e.step, e.micro, idx, names);
}

// parallel_for's work estimate per rank: always worth a thread (a step is milliseconds).
constexpr double kRankWork = 1e9;

GptRunResult run_gpt(const RunConfig& cfg, const std::vector<GptRank*>& local, const GptSync& sync) {
  GptRunResult out;
  std::vector<ddp::Reducer*> reducers;
  for (GptRank* rk : local) reducers.push_back(rk->reducer.get());
  out.buckets_first = reducers[0]->describe();
  // 1.13 rebuilds buckets after the first iteration unless find_unused_parameters (without static_graph).
  const bool rebuilds = !cfg.find_unused_parameters || cfg.static_graph;
  std::optional<UnfinishedReduction> pending;
  for (int64_t step = 0; step < cfg.steps; ++step) {
    if (cfg.eval_every > 0 && step % cfg.eval_every == 0) {
      for (GptRank* rk : local) rk->estimate_loss(step);
    }
    for (int64_t micro = 0; micro < cfg.no_sync; ++micro) {
      if (pending) {  // DDP's forward checks that the previous reduction finished, before the module runs
        pending->step = step;
        pending->micro = micro;
        out.error = pending;
        return out;
      }
      parallel_for(sync.pool, local.size(), kRankWork, [&](size_t r) { local[r]->forward_backward(step); });
      if (micro + 1 < cfg.no_sync) continue;  // model.no_sync(): grads accumulate locally
      std::vector<std::vector<bool>> unused;
      for (GptRank* rk : local) unused.push_back(rk->unused());
      size_t reducible = reducers[0]->num_buckets();
      if (cfg.find_unused_parameters) {
        const std::vector<bool> global = sync.global_unused(unused);
        for (size_t r = 0; r < local.size(); ++r) reducers[r]->set_unused(unused[r], global);
        std::string names;
        for (size_t i = 0; i < global.size(); ++i) {
          if (global[i]) names += (names.empty() ? "" : ", ") + local[0]->params[i]->name;
        }
        if (!names.empty()) {
          out.notes.push_back(fmt::format(
              "step {}: no rank used {}: find_unused_parameters marked it ready before the backward (its bucket "
              "slot is zeros) and left its .grad as it was: {}",
              step, names,
              cfg.zero_grad_set_to_none ? "None (zero_grad(set_to_none=True)), so AdamW skips it: no decay"
                                        : "zeros (zero_grad(set_to_none=False)), so AdamW still decays it"));
        }
      } else if (std::find(unused[0].begin(), unused[0].end(), true) != unused[0].end()) {
        // Buckets are all-reduced in order as they fill: those before the first one still waiting for a
        // grad are; the rest never are. The next training forward raises.
        UnfinishedReduction e{step, micro, {}, {}};
        for (size_t i = 0; i < unused[0].size(); ++i) {
          if (unused[0][i]) {
            e.indices.push_back(i);
            e.params.push_back(local[0]->params[i]->name);
          }
        }
        pending = e;
        reducible = 0;
        while (reducible < reducers[0]->num_buckets()) {
          bool complete = true;
          for (size_t i : reducers[0]->bucket(reducible).params) complete = complete && !unused[0][i];
          if (!complete) break;
          ++reducible;
        }
      }
      std::vector<ddp::HookReport> reports = sync.allreduce(reducers, reducible);
      if (reducers[0]->comm_hook()) out.hook_reports.push_back(std::move(reports));
      if (rebuilds && !reducers[0]->rebuilt()) {
        for (size_t r = 0; r < local.size(); ++r) {
          // find_unused_parameters (static_graph) marks the unused ready first, before autograd's hooks.
          std::vector<Parameter*> order;
          for (size_t i = 0; i < unused[r].size(); ++i) {
            if (unused[r][i]) order.push_back(local[r]->params[i]);
          }
          order.insert(order.end(), local[r]->ready.begin(), local[r]->ready.end());
          reducers[r]->finish_sync(order);
        }
        out.buckets_rebuilt = reducers[0]->describe();
      }
    }
    parallel_for(sync.pool, local.size(), kRankWork, [&](size_t r) { local[r]->optimizer_step(); });
  }
  if (cfg.eval_every > 0) {
    for (GptRank* rk : local) rk->estimate_loss(cfg.steps);
  }
  return out;
}

GptSimResult simulate_gpt(const RunConfig& cfg, const TextData& data,
                          const std::function<void(size_t buckets_reduced)>& on_allreduce) {
  GptSimResult out;
  std::vector<GptRank*> local;
  for (int64_t r = 0; r < cfg.world_size; ++r) {
    out.ranks.push_back(std::make_unique<GptRank>(cfg, data, r));
    local.push_back(out.ranks.back().get());
  }
  // DDP(model): every rank takes rank 0's parameters (and buffers: the causal masks, equal anyway).
  for (GptRank* rk : local) {
    for (size_t i = 0; i < rk->params.size(); ++i) rk->params[i]->value = local[0]->params[i]->value;
    rk->start();
  }
  ddp::InProcessAllreduce allreduce;
  GptSync sync;
  sync.global_unused = [](const std::vector<std::vector<bool>>& l) {
    std::vector<bool> g(l[0].size(), true);
    for (const auto& u : l) {
      for (size_t i = 0; i < u.size(); ++i) g[i] = g[i] && u[i];
    }
    return g;
  };
  // A comm hook runs per rank, each on its own thread (ddp/hooked_sync.h).
  std::unique_ptr<ddp::HookedAllreduce> hooked;
  if (cfg.comm_hook.name != "none") {
    hooked = std::make_unique<ddp::HookedAllreduce>(static_cast<int>(cfg.world_size), collective::Algorithm::ring);
  }
  sync.allreduce = [&](const std::vector<ddp::Reducer*>& reducers, size_t n) -> std::vector<ddp::HookReport> {
    if (on_allreduce) on_allreduce(std::min(n, reducers[0]->num_buckets()));
    if (hooked) return hooked->run(reducers, n);
    allreduce.run(reducers, collective::Algorithm::ring, nullptr, nullptr, n);
    return {};
  };
  static_cast<GptRunResult&>(out) = run_gpt(cfg, local, sync);
  return out;
}

}  // namespace ddplab::gpt
