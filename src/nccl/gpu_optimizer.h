// The device-resident trainer's optimizer step (src/nccl/gpu_trainer.cc): optim.cc's SGD and Adam for every
// parameter at once. The parameters are one flat array, each element's update depends only on its own
// values, and every parameter has the same step count and hyperparameters. Scalars are computed on the host
// exactly as optim.cc computes them (std::pow in double included); the element-wise updates are
// gpu_trainer_ops.h's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/ddp/config.h"

namespace ddplab::dist {

// The optimizer's state: buffers of the flat array's size in device memory the trainer owns (Adam's
// exp_avg and exp_avg_sq, zeroed before the first step; SGD's momentum buffer when cfg.momentum != 0;
// nullptr otherwise), and what optim.cc keeps on the host beside them.
struct DeviceOptimizerState {
  float *momentum = nullptr, *exp_avg = nullptr, *exp_avg_sq = nullptr;
  bool momentum_ready = false;
  int64_t adam_steps = 0;
};

// optimizer.step() on the `total` parameters `p` with their gradients `g` (device memory), the optimizer
// and hyperparameters of `cfg`, enqueued on `stream` (a cudaStream_t).
void device_optimizer_step(const ddp::Config& cfg, float* p, const float* g, size_t total, DeviceOptimizerState& st,
                           void* stream);

}  // namespace ddplab::dist
