// y = x + branch(x) and its backward (see residual.h).
#include "src/model/residual.h"

#include <stdexcept>

namespace ddplab {

Tensor Residual::forward(const Tensor& x) {
  Tensor y = branch_->forward(x);
  if (y.numel() != x.numel()) throw std::invalid_argument(repr() + ": the branch changed the size");
  // x + branch(x), one float add per element (at::add).
  float* o = y.data();
  const float* a = x.data();
  for (int64_t i = 0; i < y.numel(); ++i) o[i] = a[i] + o[i];
  y.shape = x.shape;
  return y;
}

Tensor Residual::backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) {
  // AddBackward0 hands grad_out to both inputs; the branch runs its backward (created later in the forward,
  // so its nodes run before anything that produced x), and x's InputBuffer sums the add's gradient, which
  // arrived first, with the branch's.
  Tensor gb = branch_->backward(grad_out, need_grad_input, ready);
  if (!need_grad_input) return Tensor();
  float* o = gb.data();
  const float* g = grad_out.data();
  for (int64_t i = 0; i < gb.numel(); ++i) o[i] = g[i] + o[i];
  gb.shape = grad_out.shape;
  return gb;
}

}  // namespace ddplab
