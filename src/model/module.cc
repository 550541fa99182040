#include "src/model/module.h"

namespace ddplab {

std::vector<const Parameter*> Module::parameters() const {
  const auto ps = const_cast<Module*>(this)->parameters();
  return {ps.begin(), ps.end()};
}

std::vector<const Buffer*> Module::buffers() const {
  const auto bs = const_cast<Module*>(this)->buffers();
  return {bs.begin(), bs.end()};
}

std::string Sequential::next_name() const { return child_name(children_.size()); }

std::string Sequential::child_name(size_t i) const {
  const std::string index = std::to_string(i);
  return prefix_.empty() ? index : prefix_ + "." + index;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& c : children_) h = c->forward(h);
  return h;
}

Tensor Sequential::backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) {
  // A child needs the grad of its input only when something before it has parameters (or the caller
  // asked for it): autograd computes no gradient for a tensor that requires none.
  std::vector<bool> before_has_params(children_.size(), need_grad_input);
  for (size_t i = 1; i < children_.size(); ++i) {
    before_has_params[i] = before_has_params[i - 1] || !children_[i - 1]->parameters().empty();
  }
  Tensor g = grad_out;
  for (size_t i = children_.size(); i-- > 0;) g = children_[i]->backward(g, before_has_params[i], ready);
  return g;
}

std::vector<Parameter*> Sequential::parameters() {
  std::vector<Parameter*> ps;
  for (auto& c : children_) {
    for (Parameter* p : c->parameters()) ps.push_back(p);
  }
  return ps;
}

std::vector<Buffer*> Sequential::buffers() {
  std::vector<Buffer*> bs;
  for (auto& c : children_) {
    for (Buffer* b : c->buffers()) bs.push_back(b);
  }
  return bs;
}

void Sequential::train(bool mode) {
  training_ = mode;
  for (auto& c : children_) c->train(mode);
}

void Sequential::set_kernels(const LinearKernels& k) {
  for (auto& c : children_) c->set_kernels(k);
}

std::string Sequential::repr() const {
  std::string out = "Sequential(\n";
  for (size_t i = 0; i < children_.size(); ++i) out += "  (" + std::to_string(i) + "): " + children_[i]->repr() + "\n";
  return out + ")";
}

}  // namespace ddplab
