// Layers without parameters whose arithmetic is a select or a copy: nn.ReLU and nn.Flatten.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
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
    // Without a branch: the input's signs are data, a branch on them mispredicts half the time (the
    // Eigen select and a plain `?:` loop compiled to one, 18% of the cnn's step). The gradient's bits
    // where the input was > 0, else +0.0f's (all bits zero): the same floats as the select.
    Matrix out(g.value.rows(), g.value.cols());
    const float* x = input_.value.data();
    const float* gi = g.value.data();
    float* o = out.data();
    for (Eigen::Index i = 0; i < out.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, gi + i, sizeof bits);
      bits &= 0u - static_cast<uint32_t>(x[i] > 0.0f);
      std::memcpy(o + i, &bits, sizeof bits);
    }
    return Tensor(g.shape, std::move(out));
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
