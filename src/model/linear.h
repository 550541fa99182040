// nn.Linear, nn.ReLU and a Sequential MLP with explicit forward and backward passes.
#pragma once

#include <string>
#include <vector>

#include "src/tensor/kernels.h"
#include "src/model/module.h"
#include "src/tensor/tensor.h"
#include "src/data/torch_rng.h"

namespace ddplab {

// nn.Linear(in_features, out_features, bias): y = x W^T + b, W is [out, in].
class Linear : public Module {
 public:
  // Draws exactly what reset_parameters draws, in its order: kaiming_uniform_(W, a=sqrt(5)) then
  // uniform_(b, -1/sqrt(in), 1/sqrt(in)) (no bias, no draw). With reset_parameters false nothing is drawn
  // and both are zero (a copy of another Linear fills them). Without a bias F.linear is matmul(x, W^T):
  // the products start from a zero bias (0 + s is s in every bit but a zero's sign), and `bias` stays
  // zero and out of parameters().
  Linear(int64_t in_features, int64_t out_features, const std::string& prefix, Generator& gen = default_generator(),
         bool reset_parameters = true, bool bias = true);

  // The Matrix API (the MLP class's): an untied Linear with a bias, its grads accumulated directly (no
  // use counting, no ready list). Modules use the Tensor API below.
  Matrix forward(const Matrix& x);  // remembers x for backward
  // Accumulates weight/bias grads; returns the grad wrt x when asked (the first layer's input needs none,
  // and PyTorch skips that product too).
  Matrix backward(const Matrix& grad_out, bool need_grad_input = true);

  // As a Module: x is [..., in_features] (rows: every index but the last). Autograd's AccumulateGrad runs
  // the bias's before the weight's.
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) override;
  std::vector<Parameter*> parameters() override;
  using Module::parameters;
  // The weight's key is this module's own ("lm_head.weight") even when it is tied to another's Parameter.
  std::vector<std::string> state_dict_keys() override;
  void set_kernels(const LinearKernels& k) override { kernels = &k; }
  std::string repr() const override;

  // Weight tying (nanoGPT's `transformer.wte.weight = lm_head.weight`): from now on this Linear computes with
  // `shared`, and its parameters() list it; the own `weight` keeps only its name (the state_dict key).
  void tie_weight(Parameter& shared);
  // The weight the products use: `weight`, or the tied Parameter.
  Parameter& effective_weight() { return tied_ != nullptr ? *tied_ : weight; }
  bool has_bias() const { return has_bias_; }

  int64_t in_features, out_features;
  Parameter weight, bias;
  const LinearKernels* kernels = &cpu_kernels(Kernels::fast);  // where the products run

 private:
  bool has_bias_ = true;
  Parameter* tied_ = nullptr;
  Matrix input_;
  std::vector<int64_t> input_shape_;  // the Module forward's
  Matrix grad_scratch_;               // the weight's gradient when it cannot go straight into .grad
};

// --model's unused_linear(in,out): an nn.Linear the model registers (its parameters, their init draws, its
// state_dict keys) and its forward never calls, the unused branch behind DDP's "Expected to have finished
// reduction in the prior iteration" (find_unused_parameters=False). x and its gradient pass through.
class UnusedLinear : public Linear {
 public:
  using Linear::Linear;
  using Linear::backward;
  using Linear::forward;
  Tensor forward(const Tensor& x) override { return x; }
  Tensor backward(const Tensor& grad_out, bool, std::vector<Parameter*>&) override { return grad_out; }
  std::string repr() const override { return "Unused" + Linear::repr(); }
};

// A stack of Linear layers, optionally with ReLU between them (not after the last).
// Parameter names follow the caller's module names, e.g. {"hidden_layer", "output_layer"} (notebook 000)
// or nn.Sequential's {"layers.0", "layers.2"}.
class MLP {
 public:
  MLP(const std::vector<int64_t>& sizes, bool relu, const std::vector<std::string>& layer_names,
      Generator& gen = default_generator());

  // nn.Sequential names: "layers.0", "layers.2" with ReLU between, "layers.0", "layers.1" without.
  static std::vector<std::string> sequential_names(size_t num_linear, bool relu, const std::string& prefix = "layers");

  Matrix forward(const Matrix& x);
  void backward(const Matrix& grad_out);  // fills .grad of every parameter
  void zero_grad(bool set_to_none = true);

  // model.parameters() order: W0, b0, W1, b1, ...
  std::vector<Parameter*> parameters();
  std::vector<const Parameter*> parameters() const;

  void set_kernels(const LinearKernels& k) {
    for (Linear& l : linears) l.kernels = &k;
  }

  std::vector<Linear> linears;
  bool relu;

 private:
  std::vector<Matrix> relu_masks_;  // pre-activations of the ReLUs, for backward
};

}  // namespace ddplab
