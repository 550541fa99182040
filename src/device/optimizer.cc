#include "src/device/optimizer.h"

#include <cmath>

#include "src/train/optim.h"

namespace ddplab::device {

void optimizer_step(const ddp::Config& cfg, Ops& ops, float* p, const float* g, size_t total, OptimizerState& st) {
  if (cfg.optimizer == ddp::OptimizerKind::adam) {
    AdamOptions o;
    o.lr = cfg.lr;
    const auto t = static_cast<double>(++st.adam_steps);
    const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
    const double bias_correction2 = 1.0 - std::pow(o.beta2, t);
    AdamScalars sc{};
    sc.beta1 = static_cast<float>(o.beta1);
    sc.beta2 = static_cast<float>(o.beta2);
    sc.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
    sc.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
    sc.neg_step_size = static_cast<float>(-(o.lr / bias_correction1));
    sc.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    sc.eps = static_cast<float>(o.eps);
    ops.adam(p, g, st.exp_avg, st.exp_avg_sq, total, sc);
    return;
  }
  SGDOptions o;  // weight_decay 0, dampening 0, no nesterov: the flags offer none of them
  o.lr = cfg.lr;
  o.momentum = cfg.momentum;
  if (o.momentum == 0.0) {
    ops.sgd(p, g, total, static_cast<float>(-o.lr));
    return;
  }
  ops.sgd_momentum(p, g, st.momentum, total, !st.momentum_ready, static_cast<float>(o.momentum),
                   static_cast<float>(1.0 - o.dampening), static_cast<float>(-o.lr));
  st.momentum_ready = true;
}

}  // namespace ddplab::device
