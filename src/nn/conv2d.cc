#include "src/nn/conv2d.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "src/nn/conv2d_impl.h"

namespace ddplab::nn {

const char* conv2d_check(const Conv2dShape& s) {
  if (s.n < 1 || s.c_in < 1 || s.c_out < 1) return "conv2d: batch and channel counts must be at least 1";
  if (s.h < 1 || s.w < 1) return "conv2d: input height and width must be at least 1";
  if (s.kernel < 1) return "conv2d: kernel size must be at least 1";
  if (s.stride < 1) return "conv2d: stride must be at least 1";
  if (s.padding < 0) return "conv2d: padding must be at least 0";
  if (s.h + 2 * s.padding < s.kernel || s.w + 2 * s.padding < s.kernel)
    return "conv2d: kernel size can't be greater than the padded input size";
  // oneDNN and BLAS take int dimensions.
  const int64_t kMax = int64_t{1} << 31;
  if (s.n * s.c_in * s.h * s.w >= kMax || s.n * s.c_out * s.out_h() * s.out_w() >= kMax ||
      s.c_in * s.kernel * s.kernel * s.out_h() * s.out_w() >= kMax)
    return "conv2d: tensors must have fewer than 2^31 elements";
  return "";
}

namespace {

void require_valid(const Conv2dShape& s) {
  const std::string why = conv2d_check(s);
  if (!why.empty()) throw std::invalid_argument(why);
}

}  // namespace

bool conv2d_uses_onednn(const Conv2dShape& s) {
  // ConvParams::use_mkldnn for a CPU float tensor, not transposed, groups 1, dilation 1, one thread:
  // 1x1 kernels with small batches go to slow_conv2d (THNN is faster single-threaded), and so do tiny
  // single-image convolutions ("for some case, native is faster").
  const bool pointwise_ok = s.stride != 1 || s.n >= 16 || s.kernel != 1;
  const bool size_ok = s.kernel > 3 || s.n > 1 || s.n * s.c_in * s.h * s.w > 20480;
  return pointwise_ok && size_ok;
}

void conv2d_forward(const Conv2dShape& s, const float* x, const float* weight, const float* bias, float* y) {
  require_valid(s);
  if (s.bias && !bias) throw std::invalid_argument("conv2d_forward: the shape has a bias but no bias was given");
  const float* b = s.bias ? bias : nullptr;
  if (conv2d_uses_onednn(s)) {
    detail::onednn_conv2d_forward(s, x, weight, b, y);
  } else {
    detail::slow_conv2d_forward(s, x, weight, b, y);
  }
}

void conv2d_backward(const Conv2dShape& s, const float* x, const float* weight, const float* grad_y, float* grad_x,
                     float* grad_w, float* grad_b) {
  require_valid(s);
  float* gb = s.bias ? grad_b : nullptr;
  if (conv2d_uses_onednn(s)) {
    detail::onednn_conv2d_backward(s, x, weight, grad_y, grad_x, grad_w, gb);
  } else {
    detail::slow_conv2d_backward(s, x, weight, grad_y, grad_x, grad_w, gb);
  }
}

void conv2d_reset_parameters(Generator& gen, const Conv2dShape& s, float* weight, float* bias) {
  // torch/nn/init.py in Python doubles, as Linear's (PYTORCH_FACTS.md): a**2 is 5.000000000000001.
  const int64_t fan_in = s.c_in * s.kernel * s.kernel;
  const double a = std::sqrt(5.0);
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double std = gain / std::sqrt(static_cast<double>(fan_in));
  const double bound = std::sqrt(3.0) * std;
  gen.uniform_(weight, s.c_out * fan_in, -bound, bound);
  if (s.bias) {
    const double bias_bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    gen.uniform_(bias, s.c_out, -bias_bound, bias_bound);
  }
}

}  // namespace ddplab::nn
