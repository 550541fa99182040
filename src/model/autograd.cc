// AccumulateGrad by recorded users (see autograd.h).
#include "src/model/autograd.h"

#include <algorithm>

#include "src/model/module.h"

namespace ddplab {

namespace {

thread_local int forward_depth = 0;

// Drops `user` from p's outstanding users; true when none is left (user's gradient is the last).
bool last_user(Parameter& p, const Module& user) {
  auto& us = p.users;
  us.erase(std::remove(us.begin(), us.end(), static_cast<const void*>(&user)), us.end());
  return us.empty();
}

}  // namespace

void count_use(Parameter& p, const Module& user) {
  const void* u = &user;
  if (std::find(p.users.begin(), p.users.end(), u) == p.users.end()) p.users.push_back(u);
}

void add_grad(Parameter& p, const Module& user, const float* g, std::vector<Parameter*>& ready) {
  const Eigen::Map<const Matrix> m(g, p.value.rows(), p.value.cols());
  if (!last_user(p, user)) {  // more gradients to come: autograd's InputBuffer keeps the running sum
    if (p.has_pending) {
      p.pending = p.pending + m;
    } else {
      p.pending = m;
      p.has_pending = true;
    }
    return;
  }
  // AccumulateGrad: .grad = sum the first time (a copy), .grad += sum after (Parameter::accumulate_grad).
  const auto accumulate = [&p](const auto& sum) {
    if (p.has_grad) {
      p.grad += sum;
    } else {
      p.grad = sum;
      p.has_grad = true;
    }
  };
  if (p.has_pending) {
    p.pending = p.pending + m;
    p.has_pending = false;
    accumulate(p.pending);
  } else {
    accumulate(m);
  }
  ready.push_back(&p);
}

float* direct_grad(Parameter& p, const Module& user) {
  if (p.has_pending || p.has_grad) return nullptr;
  for (const void* u : p.users) {
    if (u != &user) return nullptr;
  }
  p.grad.resize(p.value.rows(), p.value.cols());  // kept from the last step when zero_grad set it to none
  return p.grad.data();
}

void grad_written(Parameter& p, const Module& user, std::vector<Parameter*>& ready) {
  last_user(p, user);
  p.has_grad = true;
  ready.push_back(&p);
}

GraphScope::GraphScope(Module& root) {
  if (forward_depth++ > 0) return;
  for (Parameter* p : root.parameters()) {
    p->users.clear();
    p->has_pending = false;
  }
}

GraphScope::~GraphScope() { --forward_depth; }

}  // namespace ddplab
