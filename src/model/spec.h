// --model SPEC: layers in nn.Sequential order with PyTorch's constructor arguments, e.g.
//   conv2d(1,8,3,padding=1),batchnorm2d(8),relu,maxpool2d(2),flatten,dropout(0.25),linear(128,10)
// parsed, checked against the input's shape (one UsageError naming the layer's position and what was
// expected), and built with each layer's reset_parameters draws in module order.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/model/module.h"
#include "src/data/torch_rng.h"

namespace ddplab {

struct LayerSpec {
  std::string kind;                     // "conv2d"
  std::map<std::string, double> args;   // every argument by name, defaults filled in
  std::string text;                     // as written: "conv2d(1,8,3,padding=1)"
  size_t position = 0;                  // 1-based, for messages; the child's index is position - 1
};

struct ModelPlan {
  std::vector<LayerSpec> layers;
  std::vector<std::vector<int64_t>> shapes;  // each layer's output shape per sample (no batch dimension)
  int64_t parameters = 0;                    // numel of every parameter
  int64_t activations = 0;                   // floats of every layer's output, per sample
  bool has_dropout = false, has_buffers = false;
};

// Parses `spec` and follows the shape of one sample (e.g. {1, 8, 8}) through it. Throws UsageError.
ModelPlan plan_model(const std::string& spec, const std::vector<int64_t>& sample_shape);

// The layers, each initialised as its reset_parameters draws from `gen`, in order. Children are named
// under `prefix` as nn.Sequential names them. Dropout draws its masks from `gen` at every forward.
// With draw false nothing is drawn at construction and every parameter is zero (for a copy to fill).
Sequential build_model(const ModelPlan& plan, const std::string& prefix, Generator& gen, bool draw = true);

// The presets: "mlp" is --layers with --activation (built as today's MLP), "cnn" a LeNet-sized net for
// the 8x8 digits.
std::string mlp_spec(const std::vector<int64_t>& layers, bool relu);
extern const char* const kCnnSpec;

}  // namespace ddplab
