// torch.optim.SGD, Adam and AdamW with PyTorch's formulas (the single-tensor path torch 1.13 takes by default).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "src/tensor/tensor.h"

namespace ddplab {

// What the DDP loop needs from any optimizer.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // Floats of optimizer state held now: torch's state tensors with dim > 0 (momentum buffers, Adam's
  // moments; not Adam's 0-dim step), allocated at a parameter's first step as torch allocates them.
  virtual int64_t state_numel() const { return 0; }
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
  int64_t state_numel() const override;
  // optimizer.state[p]['momentum_buffer'] as a recorded run had it before a step (ddp_check replays
  // one step from a trace); i indexes the parameters as given.
  void set_momentum_buffer(size_t i, Matrix buf) {
    momentum_buffer_[i] = std::move(buf);
    has_buffer_[i] = true;
  }
  // The momentum buffer after the last step (ddp_check carries it to the next), or null where there is none.
  const Matrix* momentum_buffer(size_t i) const { return has_buffer_[i] ? &momentum_buffer_[i] : nullptr; }

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
  // torch >= 2.1's single-tensor form: exp_avg.lerp_(grad, 1 - beta1) (ATen's lerp: one fused multiply-add,
  // start + weight * (end - start) for weight < 0.5) and bias_correction2 ** 0.5, where 1.13 has
  // mul_(beta1).add_(grad, alpha=1 - beta1) and math.sqrt. ddp_check picks it from the run's torch version.
  bool torch2 = false;
};

// One of torch's param_groups: parameters and the hyperparameters they are stepped with.
struct AdamParamGroup {
  std::vector<Parameter*> params;
  AdamOptions options;
};

// torch.optim.Adam (amsgrad=False, maximize=False), torch 1.13's single-tensor path:
//   g = g + weight_decay * p  (Adam), or p = p * (1 - lr * weight_decay) first (AdamW: decoupled)
//   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g * g
//   p = p + (-lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Scalars are Python doubles rounded to float where they meet a tensor, as in PyTorch. A parameter without
// a grad is skipped: no decay, and its step count t does not advance. Groups are stepped in order.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Parameter*> params, AdamOptions options) : Adam({{std::move(params), options}}) {}
  // Throws UsageError when a parameter appears twice (torch: "some parameters appear in more than one
  // parameter group").
  explicit Adam(std::vector<AdamParamGroup> groups) : Adam(std::move(groups), false) {}
  void step() override;
  int64_t state_numel() const override;
  // optimizer.state[p] as a recorded run had it before a step: exp_avg, exp_avg_sq and 'step' (ddp_check
  // replays one step from a trace); i indexes the parameters in group order.
  void set_state(size_t i, Matrix exp_avg, Matrix exp_avg_sq, int64_t step) {
    exp_avg_[i] = std::move(exp_avg);
    exp_avg_sq_[i] = std::move(exp_avg_sq);
    steps_[i] = step;
  }
  // The state after the last step (ddp_check carries it to the next); step_count 0: no state yet.
  const Matrix& exp_avg(size_t i) const { return exp_avg_[i]; }
  const Matrix& exp_avg_sq(size_t i) const { return exp_avg_sq_[i]; }
  int64_t step_count(size_t i) const { return steps_[i]; }

 protected:
  Adam(std::vector<AdamParamGroup> groups, bool decoupled_weight_decay);

 private:
  std::vector<AdamParamGroup> groups_;
  bool decoupled_weight_decay_;
  // State per parameter, in params_ order (the groups' parameters one after the other).
  std::vector<Matrix> exp_avg_, exp_avg_sq_;
  std::vector<int64_t> steps_;
};

// torch.optim.AdamW (amsgrad=False, maximize=False, foreach=False: 1.13's default on CPU): Adam with the
// weight decay applied to the parameter, param.mul_(1 - lr * weight_decay), before the moments.
// options.weight_decay is used as given (torch's AdamW defaults to 0.01, AdamOptions to 0).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Parameter*> params, AdamOptions options) : AdamW({{std::move(params), options}}) {}
  explicit AdamW(std::vector<AdamParamGroup> groups) : Adam(std::move(groups), true) {}
};

// nanoGPT's configure_optimizers groups: [{parameters of 2 or more dimensions, options.weight_decay},
// {the others (biases, LayerNorm), weight decay 0}], each in the order given.
std::vector<AdamParamGroup> weight_decay_groups(const std::vector<Parameter*>& params, AdamOptions options);

}  // namespace ddplab
