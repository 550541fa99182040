// nn.Module for ddplab: explicit forward and backward over Tensors, parameters() and buffers() with their
// state_dict names, train() / eval(); and nn.Sequential. Layers are one file pair each (src/model/*.h):
// a Module wrapping forward/backward kernels over explicit buffers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/kernels.h"
#include "src/tensor.h"

namespace ddplab {

class Module {
 public:
  virtual ~Module() = default;

  virtual Tensor forward(const Tensor& x) = 0;
  // dL/dx from dL/dy (an undefined Tensor when !need_grad_input: the model's input needs none, and
  // PyTorch skips that product too). Parameter grads are assigned the first time and accumulated after,
  // as autograd does; each parameter whose grad is final is appended to `ready` in the order autograd's
  // AccumulateGrad nodes run (what DDP's Reducer records to rebuild its buckets).
  virtual Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) = 0;

  // model.parameters() / model.buffers(), in registration order.
  virtual std::vector<Parameter*> parameters() { return {}; }
  virtual std::vector<Buffer*> buffers() { return {}; }
  std::vector<const Parameter*> parameters() const;
  std::vector<const Buffer*> buffers() const;

  // model.train() / model.eval().
  virtual void train(bool mode = true) { training_ = mode; }
  void eval() { train(false); }
  bool training() const { return training_; }

  // Where Linear's products run (cpu_kernels(cfg.kernels) or a GPU's).
  virtual void set_kernels(const LinearKernels&) {}
  // As print(module) shows it, e.g. "Linear(in_features=6, out_features=4, bias=True)".
  virtual std::string repr() const = 0;

 protected:
  bool training_ = true;
};

// nn.Sequential: children named "0", "1", ... under `prefix` (e.g. "layers" gives "layers.0.weight").
class Sequential : public Module {
 public:
  explicit Sequential(std::string prefix = "") : prefix_(std::move(prefix)) {}
  Sequential(Sequential&&) = default;
  Sequential& operator=(Sequential&&) = default;

  // The name the next child gets: "<prefix>.<index>" (or "<index>" without a prefix).
  std::string next_name() const;
  // Child i's state_dict prefix: "<prefix>.<i>" (or "<i>").
  std::string child_name(size_t i) const;
  void push_back(std::unique_ptr<Module> m) { children_.push_back(std::move(m)); }
  size_t size() const { return children_.size(); }
  Module& operator[](size_t i) { return *children_[i]; }
  const Module& operator[](size_t i) const { return *children_[i]; }

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) override;
  // The whole backward of a model: every parameter's grad, the input's none.
  void backward(const Tensor& grad_out, std::vector<Parameter*>& ready) { backward(grad_out, false, ready); }
  std::vector<Parameter*> parameters() override;
  std::vector<Buffer*> buffers() override;
  using Module::buffers;
  using Module::parameters;
  void train(bool mode = true) override;
  void set_kernels(const LinearKernels& k) override;
  std::string repr() const override;

 private:
  std::string prefix_;
  std::vector<std::unique_ptr<Module>> children_;
};

}  // namespace ddplab
