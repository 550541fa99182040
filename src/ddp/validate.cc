// The checks a Config must pass before anything runs (each refusal one line naming the flag and its limit),
// and what a run of it allocates, for src/base/limits.h's ceilings.
#include <fmt/format.h>

#include "src/ddp/config.h"
#include "src/ddp/flag_table.h"
#include "src/ddp/join.h"
#include "src/base/limits.h"
#include "src/model/spec.h"

namespace ddplab::ddp {

namespace {

// --model gpt's own checks, and the footprint of its parameters, AdamW state and activations.
void validate_gpt(const Config& c) {
  const gpt::GptConfig& m = c.gpt;
  if (m.n_embd % m.n_head != 0) {
    throw UsageError(fmt::format("--n-embd must be a multiple of --n-head (got {} and {})", m.n_embd, m.n_head));
  }
  if (c.dataset != DatasetKind::text) throw UsageError("--model gpt trains on --dataset text (nanoGPT's get_batch)");
  if (c.optimizer != OptimizerKind::adamw) throw UsageError("--model gpt trains with --optimizer adamw (nanoGPT's)");
  if (c.static_graph && m.aux_head_every > 1) {
    throw UsageError("--static-graph true needs the same parameters used every iteration (got --aux-head-every " +
                     std::to_string(m.aux_head_every) + "); use --find-unused-parameters true instead");
  }
  if (c.static_graph && c.no_sync > 1) {  // measured: tests/golden/gpt/check_facts.py d
    throw UsageError(fmt::format(
        "--static-graph true with --no-sync {}: torch 1.13 fails an internal assert there (expect_autograd_hooks_, "
        "reducer.cpp) at step 1's first backward; use --no-sync 1 or --static-graph false",
        c.no_sync));
  }
  check_footprint(footprint(c), "--model gpt: --n-layer, --n-embd, --block-size, --batch-size, --world-size");
}

}  // namespace

// --hand-sync: a script's own averaging replaces DDP's Reducer, so DDP's own options do not apply to it.
void validate_hand_sync(const Config& c) {
  if (c.hand_sync == HandSync::none) {
    if (c.average == Average::multiply || c.average == Average::divide_first)
      throw UsageError(fmt::format("--average {} is a hand-written sync's arithmetic: give --hand-sync per-parameter, "
                                   "flat or buckets (DDP's own averaging is predivide)",
                                   choice_names().average[static_cast<size_t>(c.average)]));
    return;
  }
  const std::string name = choice_names().hand_sync[static_cast<size_t>(c.hand_sync)];
  const std::pair<bool, const char*> refused[] = {
      {c.comm_hook.name != "none", "--comm-hook (a hook replaces DDP's averaging, and here there is no DDP)"},
      {c.average == Average::avg, "--average avg (ReduceOp.AVG: torch 1.13's Gloo refuses it, torch 2.x's computes SUM "
                                  "then / world_size, which is --average postdivide)"},
      {c.find_unused_parameters, "--find-unused-parameters true (DDP's option)"},
      {c.static_graph, "--static-graph true (DDP's option)"},
      {c.gradient_as_bucket_view, "--gradient-as-bucket-view true (DDP's option)"},
      {c.join || c.uneven > 0, "--uneven or --join (Join shadows DDP's all-reduces)"},
      {c.sync_batchnorm, "--sync-batchnorm true"},
      {c.sync_on != SyncOn::last, "--sync-on first or never"},
  };
  for (const auto& [bad, what] : refused)
    if (bad) throw UsageError(fmt::format("--hand-sync {}: not with {}", name, what));
}

void validate(const Config& c) {
  validate_hand_sync(c);
  if (c.comm_hook.name != "none" && c.average != Average::predivide) {
    throw UsageError(fmt::format("--comm-hook {} replaces DDP's averaging: --average must stay predivide (got {})",
                                 c.comm_hook.name, choice_names().average[static_cast<size_t>(c.average)]));
  }
  if (c.sync_on == SyncOn::first && c.no_sync < 2) {
    throw UsageError("--sync-on first needs --no-sync K of 2 or more (with one micro-batch a step, the first is the "
                     "last)");
  }
  if (c.sync_on != SyncOn::last && c.join) {
    throw UsageError(fmt::format("--sync-on {} with --join true: Join shadows the all-reduces of ranks that run "
                                 "every step's last micro-batch outside no_sync(); use --sync-on last",
                                 choice_names().sync_on[static_cast<size_t>(c.sync_on)]));
  }
  if (c.sync_batchnorm && !c.is_gpt() && c.model_spec().find("batchnorm") == std::string::npos) {
    throw UsageError("--sync-batchnorm true: the model has no BatchNorm layer to convert (give a --model with "
                     "batchnorm1d or batchnorm2d, or --model cnn)");
  }
  if (c.sync_batchnorm && (c.uneven > 0 || c.join)) {
    throw UsageError("--sync-batchnorm true with --uneven or --join: SyncBatchNorm all_gathers in every training "
                     "forward, so a rank that ran out of batches leaves the others waiting; ddplab does not model it "
                     "(give every rank the same number of batches)");
  }
  if (c.join_scope == JoinScope::run && c.no_sync > 1) {
    throw UsageError(fmt::format(
        "--join-scope run pairs each rank's all-reduces across epochs one batch at a time: it takes --no-sync 1 "
        "(got {})",
        c.no_sync));
  }
  if (c.is_gpt()) {
    validate_gpt(c);
    validate_uneven(c);
    return;
  }
  if (c.dataset == DatasetKind::text) throw UsageError("--dataset text is --model gpt's (nanoGPT's get_batch)");
  if (c.optimizer == OptimizerKind::adamw) throw UsageError("--optimizer adamw is --model gpt's (sgd or adam here)");
  if (c.dataset == DatasetKind::toy && (c.layers.front() != 2 || c.layers.back() != 2)) {
    throw UsageError(
        fmt::format("--dataset toy has 2 features and 2 classes: --layers must start and end with 2 "
                    "(got {})",
                    fmt::join(c.layers, ",")));
  }
  if (c.dataset_size() < c.world_size) {
    throw UsageError(fmt::format("--world-size {} exceeds the dataset size {}: every rank needs a sample", c.world_size,
                                 c.dataset_size()));
  }
  if (c.inject_nan_rank >= c.world_size) {
    throw UsageError(fmt::format("--inject-nan {}:{}: rank {} is not one of the {} ranks (0 to {})", c.inject_nan_rank,
                                 c.inject_nan_step, c.inject_nan_rank, c.world_size, c.world_size - 1));
  }
  if (c.dataset == DatasetKind::digits) {
    if (c.loss != LossKind::ce) throw UsageError("--dataset digits has labels 0..9: it trains with --loss ce");
    if (c.is_mlp() && (c.layers.front() != 64 || c.layers.back() != 10)) {
      throw UsageError(
          fmt::format("--dataset digits has 64 pixels and 10 classes: --layers must start with 64 and "
                      "end with 10 (got {})",
                      fmt::join(c.layers, ",")));
    }
  }
  const ModelPlan plan = [&c] {
    try {
      return plan_model(c.model_spec(), c.sample_shape());
    } catch (const UsageError& e) {  // an image model on vectors: name the data it is made for
      const std::string why = e.what();
      if (c.dataset != DatasetKind::digits && why.find(", H, W] per sample") != std::string::npos) {
        throw UsageError(fmt::format("{}: this model reads images; add --dataset digits (the 8x8 digits, [1, 8, 8] "
                                     "per sample)",
                                     why));
      }
      if (c.dataset != DatasetKind::digits && why.find("features per sample") != std::string::npos) {
        throw UsageError(fmt::format("{}: the data's widths come from --layers (now {} in, {} out); give --layers "
                                     "IN,OUT to match the model",
                                     why, c.layers.front(), c.layers.back()));
      }
      throw;
    }
  }();
  const std::vector<int64_t> want = {c.num_classes()};
  if (plan.shapes.back() != want) {
    throw UsageError(fmt::format("--model: the last layer gives {} values per sample; --dataset {} needs {}",
                                 fmt::join(plan.shapes.back(), "x"), dataset_name(c.dataset), c.num_classes()));
  }
  const int64_t shard = c.num_samples_per_rank();
  if (c.batch_size > shard) {
    throw UsageError(
        fmt::format("--batch-size {} is larger than a rank's shard of {} samples "
                    "(dataset {} / world size {}); PyTorch's DataLoader would give each rank one short batch of {} per "
                    "epoch: --batch-size {} runs that",
                    c.batch_size, shard, c.dataset_size(), c.world_size, shard, shard));
  }
  check_footprint(footprint(c), "--layers, --world-size, --samples, --batch-size");
  validate_uneven(c);
}

Footprint footprint(const Config& c) {
  Footprint f;
  if (c.is_gpt()) {
    const gpt::GptConfig& m = c.gpt;
    const int64_t vocab = m.vocab_size > 0 ? m.vocab_size : 256;  // before the data is read: a byte vocabulary's most
    f.parameters = gpt::gpt_parameter_count(m, vocab);
    f.copies = 5;               // the parameter, its gradient, its bucket slot, AdamW's exp_avg and exp_avg_sq
    f.replicas = c.world_size;  // the simulator holds them all; ddp_verify's rank 0 runs the simulator
    // One rank's activations kept for the backward: per layer ~17 x B T C floats plus 3 x B H T T for attention,
    // then ~3 x B T V for the logits and their gradient.
    const int64_t bt = c.batch_size * m.block_size;
    f.activations = m.n_layer * (17 * bt * m.n_embd + 3 * bt * m.n_head * m.block_size) + 3 * bt * vocab;
    return f;
  }
  int64_t widths = 0;
  if (c.is_mlp()) {
    for (size_t i = 0; i < c.layers.size(); ++i) {
      widths += c.layers[i];
      if (i + 1 < c.layers.size()) f.parameters += c.layers[i] * c.layers[i + 1] + c.layers[i + 1];
    }
  } else {  // validate() has planned it once already; planning allocates nothing
    const ModelPlan plan = plan_model(c.model_spec(), c.sample_shape());
    f.parameters = plan.parameters;
    widths = plan.activations;
  }
  f.replicas = c.world_size;  // the simulator holds them all; ddp_verify's rank 0 runs the simulator
  f.copies = 3 + (c.momentum > 0 ? 1 : 0) + (c.optimizer == OptimizerKind::adam ? 2 : 0);
  int64_t sample = 1;
  for (int64_t d : c.sample_shape()) sample *= d;
  f.data = c.dataset_size() * (sample + c.num_classes());
  f.activations = 2 * c.batch_size * widths;  // outputs and their gradients
  return f;
}

}  // namespace ddplab::ddp
