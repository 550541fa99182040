// A residual connection as a container Module: y = x + branch(x) (a transformer block's
// `x = x + self.attn(self.ln_1(x))`). Its backward is autograd's for that add: the branch's backward runs
// (its parameters become ready in its own order), and x's gradient is the sum that reaches x's InputBuffer,
// the add's own first and the branch's second: grad + branch's grad.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/model/module.h"

namespace ddplab {

class Residual : public Module {
 public:
  explicit Residual(std::unique_ptr<Module> branch) : branch_(std::move(branch)) {}

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) override;
  std::vector<Module*> children() override { return {branch_.get()}; }
  std::string repr() const override { return "Residual(" + branch_->repr() + ")"; }

  Module& branch() { return *branch_; }

 private:
  std::unique_ptr<Module> branch_;
};

}  // namespace ddplab
