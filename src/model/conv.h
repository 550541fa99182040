// nn.Conv2d and nn.MaxPool2d as Modules over the kernels of src/nn (oneDNN or slow_conv2d, as torch picks).
#pragma once

#include <string>
#include <vector>

#include "src/model/module.h"
#include "src/nn/conv2d.h"
#include "src/nn/maxpool2d.h"
#include "src/data/torch_rng.h"

namespace ddplab {

// nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, bias): square kernels, groups 1.
// weight [out, in, k, k] (stored [out, in*k*k]), bias [out]; reset_parameters' draws at construction
// (none with reset_parameters false: both zero, for a copy of another Conv2d to fill).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride, int64_t padding, bool bias,
         const std::string& prefix, Generator& gen, bool reset_parameters = true);

  Tensor forward(const Tensor& x) override;  // x [N, in, H, W]
  // ConvolutionBackward0 hands autograd the weight's gradient before the bias's (measured with hooks).
  Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) override;
  std::vector<Parameter*> parameters() override;
  using Module::parameters;
  std::string repr() const override;

  Parameter weight, bias;

 private:
  nn::Conv2dShape shape_;  // n is the last forward's batch
  Tensor input_;
};

// nn.MaxPool2d(kernel_size, stride=kernel_size, padding=0).
class MaxPool2d : public Module {
 public:
  MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding);
  Tensor forward(const Tensor& x) override;  // x [N, C, H, W]
  Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) override;
  std::string repr() const override;

 private:
  nn::MaxPool2dShape shape_;
  std::vector<int64_t> indices_;
};

}  // namespace ddplab
