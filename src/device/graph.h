// The host model's module graph as the device trainer runs it: each child of the nn.Sequential (src/model/
// module.h) becomes a node whose forward and backward are calls on an Ops (src/device/ops.h), on the host
// (CpuOps) or on a CUDA stream. The nodes do what the host layers do, product for product: Linear
// (src/model/linear.cc) and ReLU (src/model/shape_layers.h); a model with any other child is refused. Parameters and
// gradients are two flat arrays in model.parameters() order; activations and gradient buffers are
// allocated once, for the largest batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/device/ops.h"
#include "src/tensor/kernels.h"
#include "src/model/module.h"

namespace ddplab::device {

// `layer "<state_dict prefix>": <repr>` for the first child of `model` that has no node, or "" when all do.
std::string missing_node(const Sequential& model);

class Node;
struct Context;

class Graph {
 public:
  // The nodes of `model`'s children for inputs of `in_width` floats per sample and batches of at most
  // `max_batch`; `accumulates`: backward may run again before zero_grad (no_sync), which needs a scratch
  // buffer. Throws UsageError naming the first child without a node. The parameters' values are not
  // copied: the caller uploads them into p().
  Graph(Sequential& model, Ops& ops, Kernels kernels, int64_t in_width, int64_t max_batch, bool accumulates);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // model.forward on `batch` samples at x (kept until backward). Returns the output, [batch, out_width()].
  const float* forward(const float* x, int64_t batch);
  // model.backward from dL/d(output) in grad_buffer() (overwritten): each node's backward from the last,
  // the input's gradient only where a node before has parameters (Sequential::backward's rule). The first
  // backward since zero_grad assigns the gradients, later ones add theirs (autograd's AccumulateGrad).
  // Appends the host parameters in the order their gradients became final (the Reducer's rebuild).
  void backward(int64_t batch, std::vector<Parameter*>& ready);
  void zero_grad() { has_grad_ = false; }  // optimizer.zero_grad(set_to_none=True)
  bool has_grad() const { return has_grad_; }

  float* grad_buffer() { return gy_[0]; }  // room for dL/d(output): [max_batch, out_width()]
  int64_t out_width() const { return out_width_; }
  // model.parameters(), their offsets in the flat arrays p() (values) and g() (gradients), and their total.
  const std::vector<Parameter*>& parameters() const { return params_; }
  const std::vector<size_t>& offsets() const { return offset_; }
  size_t total() const { return total_; }
  float* p() { return p_; }
  float* g() { return g_; }

 private:
  std::unique_ptr<Context> ctx_;  // what the nodes share; declared first, destroyed last
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<bool> need_grad_input_;  // per node: whether a node before it has parameters
  std::vector<Parameter*> params_;
  std::vector<size_t> offset_;
  size_t total_ = 0;
  int64_t out_width_ = 0;
  bool has_grad_ = false;
  float *p_ = nullptr, *g_ = nullptr, *scratch_ = nullptr, *gy_[2] = {nullptr, nullptr};
};

}  // namespace ddplab::device
