// torch.optim.SGD with PyTorch's formulas (the single-tensor path torch 1.13 takes by default).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "src/tensor.h"

namespace ddplab {

// What the DDP loop needs from any optimizer.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  void zero_grad(bool set_to_none = true) {
    for (Parameter* p : params_) p->zero_grad(set_to_none);
  }

 protected:
  explicit Optimizer(std::vector<Parameter*> params) : params_(std::move(params)) {}
  std::vector<Parameter*> params_;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Parameter*> params, SGDOptions options);
  // For each parameter with a grad:
  //   d_p = grad (+ weight_decay * p);  buf = d_p first time, else momentum * buf + (1 - dampening) * d_p;
  //   d_p = nesterov ? d_p + momentum * buf : buf;  p = p - lr * d_p.
  // Each "a + alpha * b" is one fused multiply-add, as PyTorch's vectorized add kernel computes it.
  void step() override;

 private:
  SGDOptions options_;
  std::vector<Matrix> momentum_buffer_;
  std::vector<bool> has_buffer_;
};

struct AdamOptions {
  double lr = 0.001;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// torch.optim.Adam (amsgrad=False), torch 1.13's single-tensor path:
//   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g * g
//   p = p + (-lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Scalars are Python doubles rounded to float where they meet a tensor, as in PyTorch.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Parameter*> params, AdamOptions options);
  void step() override;

 private:
  AdamOptions options_;
  std::vector<Matrix> exp_avg_, exp_avg_sq_;
  std::vector<int64_t> steps_;
};

}  // namespace ddplab
