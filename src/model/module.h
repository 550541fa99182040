// nn.Module for ddplab: explicit forward and backward over Tensors, parameters() and buffers() with their
// state_dict names, train() / eval(); and nn.Sequential. Layers are one file pair each (src/model/*.h):
// a Module wrapping forward/backward kernels over explicit buffers. Containers (Sequential, Residual, a
// model's own class) list their submodules in children(), which gives parameters(), buffers(),
// state_dict_keys(), train() and the rest for the whole tree; leaves count their parameters' uses and hand
// their gradients to autograd.h's add_grad, so the order parameters become ready follows from the tree.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/tensor/kernels.h"
#include "src/model/autograd.h"
#include "src/tensor/tensor.h"
#include "src/data/torch_rng.h"

namespace ddplab {

class Module {
 public:
  virtual ~Module() = default;

  virtual Tensor forward(const Tensor& x) = 0;
  // The forward of a module whose input is token ids (nn.Embedding, a language model): ids of `shape`,
  // flattened row-major. The default throws std::logic_error (the module takes a float Tensor).
  virtual Tensor forward_ids(const std::vector<int64_t>& ids, const std::vector<int64_t>& shape);
  // dL/dx from dL/dy (an undefined Tensor when !need_grad_input: the model's input needs none, and
  // PyTorch skips that product too). Parameter grads are assigned the first time and accumulated after,
  // as autograd does; each parameter whose grad is final is appended to `ready` in the order autograd's
  // AccumulateGrad nodes run (what DDP's Reducer records to rebuild its buckets).
  virtual Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) = 0;

  // model.children(): the direct submodules in registration order (none for a leaf).
  virtual std::vector<Module*> children() { return {}; }
  // model.parameters() / model.buffers(), in registration order. Leaves return their own; the default
  // walks children(), each Parameter once where it is first met (named_parameters' remove_duplicate: a tied
  // weight is listed under its first owner).
  virtual std::vector<Parameter*> parameters();
  virtual std::vector<Buffer*> buffers();
  std::vector<const Parameter*> parameters() const;
  std::vector<const Buffer*> buffers() const;
  // model.state_dict().keys(): a module's own parameters and buffers, then each child's keys (a tied weight
  // under every module that holds it). The default: a leaf's parameters' then buffers' names; a container's
  // children's keys in order (a container with its own buffers overrides).
  virtual std::vector<std::string> state_dict_keys();

  // model.train() / model.eval(): this module and every child.
  virtual void train(bool mode = true);
  void eval() { train(false); }
  bool training() const { return training_; }

  // Where Linear's products run (cpu_kernels(cfg.kernels) or a GPU's); the default passes it to children().
  virtual void set_kernels(const LinearKernels& k);
  // The generator dropout draws from (the rank's global one); the default passes it to children().
  virtual void set_generator(Generator& gen);
  // As print(module) shows it, e.g. "Linear(in_features=6, out_features=4, bias=True)".
  virtual std::string repr() const = 0;

 protected:
  bool training_ = true;
};

// model.apply(fn): fn on every submodule, children before their parent (post-order), then on `m` itself.
void apply(Module& m, const std::function<void(Module&)>& fn);

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

  // The children in order; the outermost forward (a model) starts a new graph (autograd.h's GraphScope).
  Tensor forward(const Tensor& x) override;
  // The first child takes the ids, the rest its output.
  Tensor forward_ids(const std::vector<int64_t>& ids, const std::vector<int64_t>& shape) override;
  Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) override;
  // The whole backward of a model: every parameter's grad, the input's none.
  void backward(const Tensor& grad_out, std::vector<Parameter*>& ready) { backward(grad_out, false, ready); }
  std::vector<Module*> children() override;
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
