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
    : params_(std::move(params)),
      options_(options),
      momentum_buffer_(params_.size()),
      has_buffer_(params_.size(), false) {}

void SGD::step() {
  const SGDOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    if (!p.has_grad) continue;
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

void SGD::zero_grad(bool set_to_none) {
  for (Parameter* p : params_) {
    p->zero_grad(set_to_none);
  }
}

}  // namespace ddplab
