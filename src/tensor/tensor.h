// The one tensor type of the library: float32, row-major, like a contiguous torch.Tensor.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ddplab {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A learnable tensor with its state_dict name. Weights are [out, in]; biases are stored as an [out, 1]
// column, so both are one contiguous run of floats in PyTorch's element order.
struct Parameter {
  std::string name;
  std::vector<int64_t> shape;  // as torch reports it: {out, in} or {out}
  Matrix value;
  Matrix grad;  // meaningful only when has_grad
  bool has_grad = false;
  // Autograd's AccumulateGrad node for this leaf (src/model/autograd.h: count_use, add_grad): the modules
  // whose forward used it and whose gradient has not come back yet, and the sum of those that have (a
  // parameter used by two modules, e.g. a tied weight, is accumulated once, when its last gradient arrives).
  std::vector<const void*> users;
  bool has_pending = false;
  Matrix pending;

  // A parameter (or buffer) with its name, torch's shape and its first value; no .grad yet.
  static Parameter named(std::string name, std::vector<int64_t> shape, Matrix value) {
    Parameter p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.value = std::move(value);
    return p;
  }

  int64_t numel() const { return value.size(); }
  float* data() { return value.data(); }
  const float* data() const { return value.data(); }

  // optimizer.zero_grad(set_to_none): drop .grad (the default since torch 2.0) or fill it with zeros.
  // A dropped grad keeps its storage for the next backward to overwrite: no allocation per step.
  void zero_grad(bool set_to_none) {
    if (set_to_none) {
      has_grad = false;
    } else if (has_grad) {
      grad.setZero();
    }
  }

  // Autograd's rule: the first backward assigns .grad, later ones accumulate into it.
  void accumulate_grad(const Matrix& g) {
    if (has_grad) {
      grad += g;
    } else {
      grad = g;
      has_grad = true;
    }
  }
};

// A module's state that is not learned (BatchNorm's running_mean, running_var, num_batches_tracked),
// with its state_dict name. Float buffers live in `value`; an int64 scalar (num_batches_tracked) in `count`.
struct Buffer {
  std::string name;
  std::vector<int64_t> shape;  // as torch reports it; {} for a scalar
  Matrix value;
  bool is_int64 = false;
  int64_t count = 0;
};

// An activation flowing through a model: float32, contiguous, row-major, batch first (NCHW for images).
// Stored as a [shape[0], numel / shape[0]] Matrix, so Linear's products and the losses read a batch of
// images as they read a batch of rows, and Flatten changes only `shape`.
struct Tensor {
  std::vector<int64_t> shape;
  Matrix value;

  Tensor() = default;
  Tensor(std::vector<int64_t> s, Matrix v) : shape(std::move(s)), value(std::move(v)) {}
  explicit Tensor(Matrix m) : shape{m.rows(), m.cols()}, value(std::move(m)) {}
  // An uninitialised tensor of `s` (s[0] rows).
  static Tensor empty(std::vector<int64_t> s) {
    int64_t n = 1;
    for (size_t i = 1; i < s.size(); ++i) n *= s[i];
    Matrix m(s.empty() ? 0 : s[0], n);
    return Tensor(std::move(s), std::move(m));
  }
  int64_t numel() const { return value.size(); }
  bool defined() const { return !shape.empty(); }
  float* data() { return value.data(); }
  const float* data() const { return value.data(); }
};

// "torch.Size([32, 6])"
std::string torch_size(const std::vector<int64_t>& shape);

}  // namespace ddplab
