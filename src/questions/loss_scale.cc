// loss-scale: does DDP sum or average the ranks' gradients, and what does dividing the loss by the world size
// do?
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "src/questions/topics.h"

namespace ddplab::questions {

namespace {

// Rank 0's gradients after the last synchronised step, every parameter in state_dict order (zero_grad with
// set_to_none keeps .grad's storage, src/tensor/tensor.h).
std::vector<float> grads(const Run& run) {
  std::vector<float> out;
  for (const Parameter* p : std::as_const(run.res.replicas[0]->model).parameters()) {
    out.insert(out.end(), p->grad.data(), p->grad.data() + p->numel());
  }
  return out;
}

}  // namespace

void loss_scale_defaults(ddp::Config& cfg) {
  cfg.world_size = 4;
  cfg.samples = 96;
  cfg.epochs = 3;
  cfg.lr = 0.05;
}

void loss_scale_run(const ddp::Config& cfg) {
  const int64_t w = cfg.world_size, b = cfg.batch_size;
  // One step on W x B samples: the gradients DDP hands every rank, against one device's at batch W x B.
  // With the random data, exactly one step; with other data (digits, ...), the first epoch's steps.
  const bool random_data = cfg.dataset == ddp::DatasetKind::random;
  ddp::Config step = cfg;
  if (random_data) step.samples = w * b;
  step.epochs = 1;
  step.no_sync = 1;
  step.zero_grad_set_to_none = true;
  ddp::Config divided = step;
  divided.loss_divisor = w;
  const auto ddp_step = simulate("DDP", step), div_step = simulate("DDP, loss / world_size", divided);
  const auto one_step = simulate("one device", one_device(step, w * b));
  const std::vector<float> g = grads(*ddp_step), gd = grads(*div_step), g1 = grads(*one_step);
  const CmpResult vs_one = cmp(".grad", g.data(), g1.data(), static_cast<int64_t>(g.size()));
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (gd[i] == 0.0f) continue;
    const double ratio = static_cast<double>(g[i]) / gd[i];
    lo = std::min(lo, ratio);
    hi = std::max(hi, ratio);
  }
  fmt::print("one step, {} ranks x {} samples{}: rank 0's .grad after the all-reduce\n", w, b,
             random_data ? "" : " (the first epoch's last step)");
  fmt::print("  DDP against one device at batch {}:\n  {}\n", w * b, format_cmp(vs_one));
  fmt::print("  DDP / DDP with loss / {}: every gradient's ratio between {} and {}\n\n", w, py(lo), py(hi));

  ddp::Config div_cfg = cfg;
  div_cfg.loss_divisor = w;
  const auto ddp_run = simulate("DDP", cfg), div_run = simulate(fmt::format("DDP, loss / {}", w), div_cfg);
  fmt::print("{}\n", loss_table({ddp_run.get(), div_run.get()}));
  fmt::print("answer: DDP averages: each rank's gradient is multiplied by 1/world_size and the products are summed "
             "by the all-reduce, so .grad is the mean over all {} x {} samples, as one device's at batch {} "
             "({}, maxdiff {})\n",
             w, b, w * b, vs_one.exact ? "exactly" : (vs_one.approximate ? "allclose" : "not allclose here"),
             py(vs_one.maxdiff));
  fmt::print("answer: so do not divide the loss by the world size: the gradients come out {} times smaller (ratio "
             "{} to {}), 1/world_size of DDP's{}\n",
             w, py(lo), py(hi),
             cfg.optimizer == ddp::OptimizerKind::sgd
                 ? fmt::format(", which for SGD is lr / {}: after {} epoch(s) the loss is {} against DDP's {}", w,
                               cfg.epochs, py(static_cast<float>(div_run->final_loss)),
                               py(static_cast<float>(ddp_run->final_loss)))
                 : fmt::format("; Adam divides by the gradients' own running size, so the scale mostly cancels "
                               "(parameters after training: {})",
                               format_model_cmp(cmp_params(*div_run, *ddp_run))));
}

}  // namespace ddplab::questions
