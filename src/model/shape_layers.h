// Layers without parameters whose arithmetic is a select or a copy: nn.ReLU and nn.Flatten.
#pragma once

#include <string>
#include <vector>

#include "src/model/module.h"

namespace ddplab {

// nn.ReLU: max(x, 0); backward (threshold_backward) passes the gradient where the input was > 0 and
// gives exactly 0 elsewhere.
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    input_ = x;
    return Tensor(x.shape, x.value.cwiseMax(0.0f));
  }
  Tensor backward(const Tensor& g, bool need_grad_input, std::vector<Parameter*>&) override {
    if (!need_grad_input) return Tensor();
    return Tensor(g.shape, (input_.value.array() > 0.0f).select(g.value, 0.0f));
  }
  std::string repr() const override { return "ReLU()"; }

 private:
  Tensor input_;
};

// nn.Flatten() (start_dim=1): [N, C, H, W] -> [N, C*H*W]. The storage is already [N, C*H*W] row-major.
class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    in_shape_ = x.shape;
    return Tensor(x.value);
  }
  Tensor backward(const Tensor& g, bool need_grad_input, std::vector<Parameter*>&) override {
    if (!need_grad_input) return Tensor();
    return Tensor(in_shape_, g.value);
  }
  std::string repr() const override { return "Flatten(start_dim=1, end_dim=-1)"; }

 private:
  std::vector<int64_t> in_shape_;
};

}  // namespace ddplab
