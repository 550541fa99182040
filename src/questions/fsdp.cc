// fsdp: what does FSDP (torch 2.x's fully_shard) change compared with DDP, and does it train the same model?
// The same configuration trained under DDP and under FSDP2's gradient sync (src/ddp/fsdp_sync.h: fully_shard on
// every layer with parameters and on the root), what each rank holds under each, the collectives of a step, and
// the two trained models side by side.
#include <fmt/format.h>

#include "src/base/errors.h"
#include "src/collective/fsdp.h"
#include "src/ddp/fsdp_sync.h"
#include "src/questions/topics.h"

namespace ddplab::questions {

void fsdp_defaults(ddp::Config& cfg) {
  cfg.world_size = 3;
  cfg.layers = {6, 16, 5, 2};  // 16 and 5 rows: shards of 6, 6, 4 and 2, 2, 1 at 3 ranks
  cfg.samples = 96;
  cfg.epochs = 2;
  cfg.momentum = 0.9;
}

void fsdp_check(const ddp::Config& cfg) {
  const auto refuse = [](const std::string& what) {
    throw UsageError("fsdp compares DDP with FSDP2 on plain training: " + what + " is not modelled under FSDP here");
  };
  if (cfg.world_size < 2) refuse("--world-size 1 (nothing to shard)");
  if (cfg.is_gpt()) refuse("--model gpt");
  if (!cfg.comm_hook.name.empty() && cfg.comm_hook.name != "none") refuse("--comm-hook");
  if (cfg.zero) refuse("--zero");
  if (cfg.join || cfg.uneven > 0) refuse("--uneven / --join");
  if (cfg.sync_batchnorm) refuse("--sync-batchnorm");
  if (cfg.clip_grad_norm > 0) refuse("--clip-grad-norm (FSDP sums the shards' squared norms)");
  if (cfg.model_spec().find("batchnorm") != std::string::npos) refuse("BatchNorm (FSDP broadcasts no buffers)");
}

namespace {

// What rank r holds under FSDP: its shard of every parameter (rows of dim 0).
int64_t shard_numel(const std::vector<Parameter*>& params, int64_t ws, int64_t r) {
  int64_t n = 0;
  for (const Parameter* p : params) {
    if (p->shape.empty() || p->shape[0] == 0) continue;
    const auto s = collective::fsdp_shard_rows(p->shape[0], ws, r);
    n += (s.end - s.begin) * (p->numel() / p->shape[0]);
  }
  return n;
}

}  // namespace

void fsdp_run(const ddp::Config& cfg) {
  const int64_t ws = cfg.world_size;
  ddp::SimHooks fsdp_hooks;
  fsdp_hooks.replace_allreduce = ddp::fsdp_allreduce;
  const auto ddp_run = simulate("DDP", cfg);
  const auto fsdp_run = simulate("FSDP2", cfg, fsdp_hooks);
  const std::vector<Parameter*> params = fsdp_run->res.replicas[0]->model.parameters();
  int64_t total = 0;
  for (const Parameter* p : params) total += p->numel();
  // Optimizer state per parameter float: SGD's momentum buffer (with momentum), Adam's two moments.
  const int64_t state_per = cfg.optimizer == ddp::OptimizerKind::sgd ? (cfg.momentum != 0.0 ? 1 : 0) : 2;
  fmt::print("fully_shard on every layer with parameters and on the root, {} ranks; what each rank holds (floats):\n",
             ws);
  for (int64_t r = 0; r < ws; ++r) {
    const int64_t mine = shard_numel(params, ws, r);
    fmt::print("  rank {}: DDP parameters {} gradients {} optimizer state {} | FSDP parameters {} gradients {} "
               "optimizer state {}\n",
               r, total, total, state_per * total, mine, mine, state_per * mine);
  }
  const auto groups = ddp::fsdp_groups(params);
  fmt::print("collectives of one step: DDP {} bucket all-reduce(s) of {} floats in all; FSDP per layer ({} layers) an "
             "all-gather of its parameters in the forward and again in the backward, and one reduce-scatter of its "
             "gradients (Gloo: its ring all-reduce over the layer's padded flat buffer, each rank keeping its slot)\n",
             ddp_run->res.replicas[0]->reducer->num_buckets(), total, groups.size());
  const ModelCmp c = cmp_params(*fsdp_run, *ddp_run);
  fmt::print("FSDP's trained model (every rank's shards together) against DDP's: {}\n", format_model_cmp(c));
  fmt::print("answer: each rank holds about 1/{} of the parameters, gradients and optimizer state under FSDP "
             "(rank 0: {} of {} floats of each), and gathers each layer's parameters to use them\n",
             ws, shard_numel(params, ws, 0), total);
  fmt::print("answer: FSDP trains the same model as DDP {}: on Gloo, DDP multiplies each gradient by 1/{} and sums "
             "the ranks' buckets; FSDP sums the ranks' padded shards and divides by {} afterwards, in another order{}\n",
             c.all_exact() ? "bit for bit here" : c.all_close() ? "up to rounding (allclose here, not bit for bit)"
                                                                : "only roughly here (not allclose)",
             ws, ws, ws == 2 ? " (with 2 ranks both are one addition of halves: the same bits)" : "");
}

}  // namespace ddplab::questions
