#include "src/optim.h"

#include <cmath>

namespace ddplab {
namespace {

// tensor.add_(other, alpha=alpha): a + alpha * b per element, fused like PyTorch's AVX2 kernel.
void add_(Matrix& a, const Matrix& b, float alpha) {
  float* pa = a.data();
  const float* pb = b.data();
  for (Eigen::Index i = 0; i < a.size(); ++i) pa[i] = std::fma(pb[i], alpha, pa[i]);
}

}  // namespace

SGD::SGD(std::vector<Parameter*> params, SGDOptions options)
    : Optimizer(std::move(params)),
      options_(options),
      momentum_buffer_(params_.size()),
      has_buffer_(params_.size(), false) {}

void SGD::step() {
  const SGDOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    if (!p.has_grad) continue;
    if (o.weight_decay == 0.0 && o.momentum == 0.0) {  // plain SGD: p.add_(grad, alpha=-lr), no copy
      add_(p.value, p.grad, static_cast<float>(-o.lr));
      continue;
    }
    Matrix d_p = p.grad;
    if (o.weight_decay != 0.0) add_(d_p, p.value, static_cast<float>(o.weight_decay));
    if (o.momentum != 0.0) {
      Matrix& buf = momentum_buffer_[i];
      if (!has_buffer_[i]) {
        buf = d_p;
        has_buffer_[i] = true;
      } else {
        buf *= static_cast<float>(o.momentum);
        add_(buf, d_p, static_cast<float>(1.0 - o.dampening));
      }
      if (o.nesterov) {
        add_(d_p, buf, static_cast<float>(o.momentum));
      } else {
        d_p = buf;
      }
    }
    add_(p.value, d_p, static_cast<float>(-o.lr));
  }
}

Adam::Adam(std::vector<Parameter*> params, AdamOptions options)
    : Optimizer(std::move(params)),
      options_(options),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()),
      steps_(params_.size(), 0) {}

void Adam::step() {
  const AdamOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    if (!p.has_grad) continue;
    if (steps_[i] == 0) {
      exp_avg_[i] = Matrix::Zero(p.value.rows(), p.value.cols());
      exp_avg_sq_[i] = Matrix::Zero(p.value.rows(), p.value.cols());
    }
    const auto step = static_cast<double>(++steps_[i]);
    Matrix grad = p.grad;
    if (o.weight_decay != 0.0) add_(grad, p.value, static_cast<float>(o.weight_decay));
    const float beta1 = static_cast<float>(o.beta1), beta2 = static_cast<float>(o.beta2);
    const float one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
    const float one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
    const double bias_correction1 = 1.0 - std::pow(o.beta1, step);
    const double bias_correction2 = 1.0 - std::pow(o.beta2, step);
    const float neg_step_size = static_cast<float>(-(o.lr / bias_correction1));
    const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    const float eps = static_cast<float>(o.eps);
    float* m = exp_avg_[i].data();
    float* v = exp_avg_sq_[i].data();
    float* w = p.data();
    const float* g = grad.data();
    for (Eigen::Index k = 0; k < p.numel(); ++k) {
      m[k] = std::fma(g[k], one_minus_beta1, m[k] * beta1);  // mul_(beta1).add_(g, alpha=1-beta1)
      // mul_(beta2), then addcmul_(g, g, value=1-beta2) = v + (value * g) * g, the last multiply fused
      v[k] = std::fma(one_minus_beta2 * g[k], g[k], v[k] * beta2);
      const float denom = std::sqrt(v[k]) / bias_correction2_sqrt + eps;
      w[k] = w[k] + neg_step_size * m[k] / denom;  // addcdiv_(m, denom, value=-step_size)
    }
  }
}

}  // namespace ddplab
