#include "src/train/optim.h"

#include <cmath>
#include <unordered_set>

#include "src/base/errors.h"

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

int64_t SGD::state_numel() const {
  int64_t n = 0;
  for (size_t i = 0; i < momentum_buffer_.size(); ++i) n += has_buffer_[i] ? momentum_buffer_[i].size() : 0;
  return n;
}

namespace {

std::vector<Parameter*> flatten(const std::vector<AdamParamGroup>& groups) {
  std::vector<Parameter*> all;
  for (const AdamParamGroup& g : groups) all.insert(all.end(), g.params.begin(), g.params.end());
  std::unordered_set<const Parameter*> seen;
  for (const Parameter* p : all) {
    if (!seen.insert(p).second) {
      throw UsageError("optimizer: parameter '" + p->name + "' appears in more than one parameter group");
    }
  }
  return all;
}

}  // namespace

Adam::Adam(std::vector<AdamParamGroup> groups, bool decoupled_weight_decay)
    : Optimizer(flatten(groups)),
      groups_(std::move(groups)),
      decoupled_weight_decay_(decoupled_weight_decay),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()),
      steps_(params_.size(), 0) {}

int64_t Adam::state_numel() const {
  int64_t n = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i) n += exp_avg_[i].size() + exp_avg_sq_[i].size();
  return n;
}

void Adam::step() {
  size_t i = 0;  // the parameter's index in params_ (and its state's)
  for (const AdamParamGroup& group : groups_) {
    const AdamOptions& o = group.options;
    for (size_t j = 0; j < group.params.size(); ++j, ++i) {
      Parameter& p = *group.params[j];
      if (!p.has_grad) continue;
      if (steps_[i] == 0) {
        exp_avg_[i] = Matrix::Zero(p.value.rows(), p.value.cols());
        exp_avg_sq_[i] = Matrix::Zero(p.value.rows(), p.value.cols());
      }
      const auto step = static_cast<double>(++steps_[i]);  // torch keeps it in a float tensor: exact to 2^24
      // AdamW: param.mul_(1 - lr * weight_decay), the factor a double rounded to float once. A factor of
      // exactly 1 (no decay) leaves every float as it is, so it is not applied.
      const float decay = static_cast<float>(1.0 - o.lr * o.weight_decay);
      const bool decay_param = decoupled_weight_decay_ && decay != 1.0f;
      Matrix coupled_grad;  // Adam: grad.add(param, alpha=weight_decay), a new tensor
      const float* g = p.grad.data();
      if (!decoupled_weight_decay_ && o.weight_decay != 0.0) {
        coupled_grad = p.grad;
        add_(coupled_grad, p.value, static_cast<float>(o.weight_decay));
        g = coupled_grad.data();
      }
      const float beta1 = static_cast<float>(o.beta1), beta2 = static_cast<float>(o.beta2);
      const float one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
      const float one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
      const double bias_correction1 = 1.0 - std::pow(o.beta1, step);
      const double bias_correction2 = 1.0 - std::pow(o.beta2, step);
      const float neg_step_size = static_cast<float>(-(o.lr / bias_correction1));
      const float bias_correction2_sqrt =
          static_cast<float>(o.torch2 ? std::pow(bias_correction2, 0.5) : std::sqrt(bias_correction2));
      const bool lerp_small = std::abs(one_minus_beta1) < 0.5f;  // ATen's is_lerp_weight_small
      const float eps = static_cast<float>(o.eps);
      float* m = exp_avg_[i].data();
      float* v = exp_avg_sq_[i].data();
      float* w = p.data();
      // torch runs each line below over the whole tensor before the next; every element's chain is the
      // same done element by element.
      for (Eigen::Index k = 0; k < p.numel(); ++k) {
        if (decay_param) w[k] *= decay;
        if (!o.torch2) {
          m[k] = std::fma(g[k], one_minus_beta1, m[k] * beta1);  // mul_(beta1).add_(g, alpha=1-beta1)
        } else if (lerp_small) {  // lerp_(g, w): fmadd(w, g - m, m)
          m[k] = std::fma(one_minus_beta1, g[k] - m[k], m[k]);
        } else {  // fmadd(w - 1, g - m, g)
          m[k] = std::fma(one_minus_beta1 - 1.0f, g[k] - m[k], g[k]);
        }
        // mul_(beta2), then addcmul_(g, g, value=1-beta2) = v + (value * g) * g, the last multiply fused
        v[k] = std::fma(one_minus_beta2 * g[k], g[k], v[k] * beta2);
        const float denom = std::sqrt(v[k]) / bias_correction2_sqrt + eps;
        w[k] = w[k] + neg_step_size * m[k] / denom;  // addcdiv_(m, denom, value=-step_size)
      }
    }
  }
}

std::vector<AdamParamGroup> weight_decay_groups(const std::vector<Parameter*>& params, AdamOptions options) {
  AdamParamGroup decay{{}, options}, no_decay{{}, options};
  no_decay.options.weight_decay = 0.0;
  for (Parameter* p : params) (p->shape.size() >= 2 ? decay : no_decay).params.push_back(p);
  return {decay, no_decay};
}

}  // namespace ddplab
