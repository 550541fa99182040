// The graph trainer's optimizer step (src/device/replica.h): optim.cc's SGD and Adam for every parameter
// at once. The parameters are one flat array, each element's update depends only on its own values, and
// every parameter has the same step count and hyperparameters. Scalars are computed on the host exactly as
// optim.cc computes them (std::pow in double included); the element-wise updates are the Ops' (ops.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/ddp/config.h"
#include "src/device/ops.h"

namespace ddplab::device {

// The optimizer's state: buffers of the flat array's size the trainer allocates from its Ops (Adam's
// exp_avg and exp_avg_sq, zeroed before the first step; SGD's momentum buffer when cfg.momentum != 0;
// nullptr otherwise), and what optim.cc keeps on the host beside them.
struct OptimizerState {
  float *momentum = nullptr, *exp_avg = nullptr, *exp_avg_sq = nullptr;
  bool momentum_ready = false;
  int64_t adam_steps = 0;
};

// optimizer.step() on the `total` parameters `p` with their gradients `g`, the optimizer and
// hyperparameters of `cfg`, through `ops`.
void optimizer_step(const ddp::Config& cfg, Ops& ops, float* p, const float* g, size_t total, OptimizerState& st);

}  // namespace ddplab::device
