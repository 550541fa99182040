#include "src/model/conv.h"

#include <stdexcept>

#include <fmt/format.h>

namespace ddplab {

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, bool has_bias,
               const std::string& prefix, Generator& gen, bool reset_parameters) {
  shape_ = {1, in, k, k, out, k, stride, padding, has_bias};
  weight.name = prefix + ".weight";
  weight.shape = {out, in, k, k};
  weight.value.resize(out, in * k * k);
  if (has_bias) {
    bias.name = prefix + ".bias";
    bias.shape = {out};
    bias.value.resize(out, 1);
  }
  if (!reset_parameters) {
    weight.value.setZero();
    bias.value.setZero();
    return;
  }
  nn::conv2d_reset_parameters(gen, shape_, weight.data(), has_bias ? bias.data() : nullptr);
}

std::vector<Parameter*> Conv2d::parameters() {
  if (!shape_.bias) return {&weight};
  return {&weight, &bias};
}

Tensor Conv2d::forward(const Tensor& x) {
  if (x.shape.size() != 4 || x.shape[1] != shape_.c_in) {
    throw std::invalid_argument(fmt::format("{} got input [{}]", repr(), fmt::join(x.shape, ", ")));
  }
  shape_.n = x.shape[0];
  shape_.h = x.shape[2];
  shape_.w = x.shape[3];
  input_ = x;
  Tensor y = Tensor::empty({shape_.n, shape_.c_out, shape_.out_h(), shape_.out_w()});
  nn::conv2d_forward(shape_, x.data(), weight.data(), shape_.bias ? bias.data() : nullptr, y.data());
  count_use(weight, *this);
  if (shape_.bias) count_use(bias, *this);
  return y;
}

Tensor Conv2d::backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) {
  Tensor gx;
  if (need_grad_input) gx = Tensor::empty(input_.shape);
  Matrix gw(weight.value.rows(), weight.value.cols()), gb(shape_.c_out, 1);
  nn::conv2d_backward(shape_, input_.data(), weight.data(), grad_out.data(), need_grad_input ? gx.data() : nullptr,
                      gw.data(), shape_.bias ? gb.data() : nullptr);
  add_grad(weight, *this, gw, ready);
  if (shape_.bias) add_grad(bias, *this, gb, ready);
  return gx;
}

std::string Conv2d::repr() const {
  const auto& s = shape_;
  std::string r = fmt::format("Conv2d({}, {}, kernel_size=({}, {}), stride=({}, {})", s.c_in, s.c_out, s.kernel,
                              s.kernel, s.stride, s.stride);
  if (s.padding) r += fmt::format(", padding=({}, {})", s.padding, s.padding);
  return r + (s.bias ? ")" : ", bias=False)");
}

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride, int64_t padding) { shape_ = {1, 1, 1, 1, kernel, stride, padding}; }

Tensor MaxPool2d::forward(const Tensor& x) {
  if (x.shape.size() != 4) throw std::invalid_argument(fmt::format("{} got input [{}]", repr(), fmt::join(x.shape, ", ")));
  shape_.n = x.shape[0];
  shape_.c = x.shape[1];
  shape_.h = x.shape[2];
  shape_.w = x.shape[3];
  Tensor y = Tensor::empty({shape_.n, shape_.c, shape_.out_h(), shape_.out_w()});
  indices_.resize(static_cast<size_t>(y.numel()));
  nn::maxpool2d_forward(shape_, x.data(), y.data(), indices_.data());
  return y;
}

Tensor MaxPool2d::backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>&) {
  if (!need_grad_input) return Tensor();
  Tensor gx = Tensor::empty({shape_.n, shape_.c, shape_.h, shape_.w});
  nn::maxpool2d_backward(shape_, indices_.data(), grad_out.data(), gx.data());
  return gx;
}

std::string MaxPool2d::repr() const {
  return fmt::format("MaxPool2d(kernel_size={}, stride={}, padding={}, dilation=1, ceil_mode=False)", shape_.kernel,
                     shape_.step(), shape_.padding);
}

}  // namespace ddplab
