#include "src/model/module.h"

#include <algorithm>
#include <stdexcept>

namespace ddplab {

Tensor Module::forward_ids(const std::vector<int64_t>&, const std::vector<int64_t>&) {
  throw std::logic_error(repr() + " takes a float tensor, not token ids");
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> ps;
  for (Module* c : children()) {
    for (Parameter* p : c->parameters()) {
      if (std::find(ps.begin(), ps.end(), p) == ps.end()) ps.push_back(p);
    }
  }
  return ps;
}

std::vector<Buffer*> Module::buffers() {
  std::vector<Buffer*> bs;
  for (Module* c : children()) {
    for (Buffer* b : c->buffers()) bs.push_back(b);
  }
  return bs;
}

std::vector<std::string> Module::state_dict_keys() {
  std::vector<std::string> keys;
  const std::vector<Module*> cs = children();
  if (cs.empty()) {
    for (Parameter* p : parameters()) keys.push_back(p->name);
    for (Buffer* b : buffers()) keys.push_back(b->name);
    return keys;
  }
  for (Module* c : cs) {
    for (std::string& k : c->state_dict_keys()) keys.push_back(std::move(k));
  }
  return keys;
}

void Module::train(bool mode) {
  training_ = mode;
  for (Module* c : children()) c->train(mode);
}

void Module::set_kernels(const LinearKernels& k) {
  for (Module* c : children()) c->set_kernels(k);
}

void Module::set_generator(Generator& gen) {
  for (Module* c : children()) c->set_generator(gen);
}

std::vector<const Parameter*> Module::parameters() const {
  const auto ps = const_cast<Module*>(this)->parameters();
  return {ps.begin(), ps.end()};
}

std::vector<const Buffer*> Module::buffers() const {
  const auto bs = const_cast<Module*>(this)->buffers();
  return {bs.begin(), bs.end()};
}

void apply(Module& m, const std::function<void(Module&)>& fn) {
  for (Module* c : m.children()) apply(*c, fn);
  fn(m);
}

std::string Sequential::next_name() const { return child_name(children_.size()); }

std::string Sequential::child_name(size_t i) const {
  const std::string index = std::to_string(i);
  return prefix_.empty() ? index : prefix_ + "." + index;
}

Tensor Sequential::forward(const Tensor& x) {
  GraphScope graph(*this);
  Tensor h = x;
  for (auto& c : children_) h = c->forward(h);
  return h;
}

Tensor Sequential::forward_ids(const std::vector<int64_t>& ids, const std::vector<int64_t>& shape) {
  if (children_.empty()) throw std::logic_error("an empty Sequential takes no token ids");
  GraphScope graph(*this);
  Tensor h = children_[0]->forward_ids(ids, shape);
  for (size_t i = 1; i < children_.size(); ++i) h = children_[i]->forward(h);
  return h;
}

std::vector<Module*> Sequential::children() {
  std::vector<Module*> cs;
  cs.reserve(children_.size());
  for (auto& c : children_) cs.push_back(c.get());
  return cs;
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
