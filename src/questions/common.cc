// What every topic shares: runs kept with their configs, one device's config, losses per epoch, the
// parameter comparison and the loss table.
#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "src/base/compare.h"
#include "src/base/errors.h"
#include "src/data/torch_rng.h"
#include "src/ddp/replica.h"
#include "src/questions/questions.h"

namespace ddplab::questions {

namespace {

// Rank 0's model's loss on the whole training set, in one forward of model.eval().
double train_set_loss(const Run& run) {
  const ddp::Config& cfg = *run.cfg;
  Generator gen;
  const Dataset data = ddp::make_dataset(cfg, gen);
  std::vector<int64_t> all(static_cast<size_t>(data.size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  Sequential& model = run.res.replicas[0]->model;
  model.eval();
  const Tensor out = model.forward(ddp::input_batch(cfg, data, all));
  model.train();
  return ddp::compute_loss(cfg, out.value, data, all).loss;
}

}  // namespace

std::unique_ptr<Run> simulate(const std::string& label, const ddp::Config& cfg, const ddp::SimHooks& hooks) {
  auto run = std::make_unique<Run>();
  run->label = label;
  run->cfg = std::make_unique<ddp::Config>(cfg);
  ddp::validate(*run->cfg);
  run->res = ddp::simulate(*run->cfg, false, hooks);
  if (run->res.error) {  // a stopped run answers nothing: say why, as ddp_sim does
    throw RunError(label + ": RuntimeError at " + ddp::unfinished_reduction_message(*run->res.error));
  }
  if (const auto& nf = run->res.nonfinite)  // no answer is built from NaN
    throw NonFiniteError(fmt::format("{}: the run's numbers became NaN or inf at step {} on rank {} ({} first): it "
                                     "diverged (an lr too large for this model and data, say), so no answer is built "
                                     "from it; try a smaller --lr",
                                     label, nf->step, nf->rank, nf->what));
  run->final_loss = train_set_loss(*run);
  return run;
}

ddp::Config one_device(const ddp::Config& cfg, int64_t batch) {
  ddp::Config c = cfg;
  c.world_size = 1;
  c.batch_size = batch;
  return c;
}

std::vector<double> epoch_losses(const Run& run) {
  std::vector<double> sum(static_cast<size_t>(run.cfg->epoch_count()), 0.0);
  std::vector<int64_t> count(sum.size(), 0);
  for (const ddp::BatchLog& l : run.res.log) {
    sum[static_cast<size_t>(l.epoch)] += l.loss;
    ++count[static_cast<size_t>(l.epoch)];
  }
  for (size_t e = 0; e < sum.size(); ++e) sum[e] /= static_cast<double>(std::max<int64_t>(count[e], 1));
  return sum;
}

int64_t steps_per_epoch(const ddp::Config& cfg) {
  return (cfg.batches_per_epoch() + cfg.no_sync - 1) / cfg.no_sync;
}

ModelCmp cmp_params(const Run& a, const Run& b, size_t rank_a, size_t rank_b) {
  ModelCmp c;
  const auto pa = std::as_const(a.res.replicas[rank_a]->model).parameters();
  const auto pb = std::as_const(b.res.replicas[rank_b]->model).parameters();
  for (size_t i = 0; i < pa.size() && i < pb.size(); ++i) {
    const CmpResult r = cmp(pa[i]->name, pa[i]->value.data(), pb[i]->value.data(), pa[i]->numel());
    ++c.tensors;
    c.exact += r.exact;
    c.approximate += r.approximate;
    c.maxdiff = std::max(c.maxdiff, r.maxdiff);
  }
  return c;
}

std::string format_model_cmp(const ModelCmp& c) {
  return fmt::format("exact: {:5s} | approximate: {:5s} | maxdiff: {} ({} of {} tensors allclose, {} exact)",
                     c.all_exact() ? "True" : "False", c.all_close() ? "True" : "False",
                     python_float_repr(c.maxdiff), c.approximate, c.tensors, c.exact);
}

std::string loss_table(const std::vector<const Run*>& runs) {
  size_t width = 4;
  for (const Run* r : runs) width = std::max(width, r->label.size());
  const size_t epochs = static_cast<size_t>(runs[0]->cfg->epoch_count());
  std::string out = fmt::format("{:<{}} | steps/epoch", "run", width);
  for (size_t e = 0; e < epochs; ++e) out += fmt::format(" | epoch {} loss", e + 1);
  out += " | loss on all samples after training\n";
  for (const Run* r : runs) {
    out += fmt::format("{:<{}} | {:>11}", r->label, width, steps_per_epoch(*r->cfg));
    const std::vector<double> l = epoch_losses(*r);
    for (size_t e = 0; e < epochs; ++e) out += fmt::format(" | {:>12.6f}", e < l.size() ? l[e] : NAN);
    out += fmt::format(" | {:.6f}\n", r->final_loss);
  }
  return out;
}

std::string per_rank_layers(const ddp::Config& cfg) {
  const std::string spec = cfg.model_spec();
  std::vector<std::string> why;
  if (spec.find("batchnorm") != std::string::npos) {
    why.push_back("BatchNorm (each rank normalises over its own batch of " + std::to_string(cfg.batch_size) +
                  ", one device over all of its batch)");
  }
  if (spec.find("dropout") != std::string::npos)
    why.push_back(cfg.seed_per_rank
                      ? "Dropout (each rank draws its own masks, from its own seed, for its own batch)"
                      : "Dropout (ranks seeded alike draw the very same mask, each for its own batch, where one "
                        "device draws one mask over the whole batch)");
  return fmt::format("{}", fmt::join(why, " and "));
}

std::string py(double v) { return python_float_repr(v); }

}  // namespace ddplab::questions
