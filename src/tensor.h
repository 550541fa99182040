// The one tensor type of the library: float32, row-major, like a contiguous torch.Tensor.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <string>
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

// "torch.Size([32, 6])"
std::string torch_size(const std::vector<int64_t>& shape);

}  // namespace ddplab
