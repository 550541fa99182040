// torch.optim.SGD with PyTorch's formulas (the single-tensor path torch 1.13 takes by default).
#pragma once

#include <vector>

#include "src/tensor.h"

namespace ddplab {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD {
 public:
  SGD(std::vector<Parameter*> params, SGDOptions options);
  // For each parameter with a grad:
  //   d_p = grad (+ weight_decay * p);  buf = d_p first time, else momentum * buf + (1 - dampening) * d_p;
  //   d_p = nesterov ? d_p + momentum * buf : buf;  p = p - lr * d_p.
  // Each "a + alpha * b" is one fused multiply-add, as PyTorch's vectorized add kernel computes it.
  void step();
  void zero_grad(bool set_to_none = true);

  const SGDOptions& options() const { return options_; }

 private:
  std::vector<Parameter*> params_;
  SGDOptions options_;
  std::vector<Matrix> momentum_buffer_;
  std::vector<bool> has_buffer_;
};

}  // namespace ddplab
