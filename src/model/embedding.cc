// nn.Embedding over src/nn/embedding.h (see embedding.h).
#include "src/model/embedding.h"

#include <stdexcept>

#include <fmt/format.h>

#include "src/nn/embedding.h"

namespace ddplab {

Embedding::Embedding(int64_t num, int64_t dim, const std::string& prefix, Generator& gen, bool reset_parameters)
    : num_(num), dim_(dim) {
  weight = Parameter::named(prefix + ".weight", {num, dim}, Matrix::Zero(num, dim));
  if (reset_parameters) gen.normal_(weight.data(), weight.numel());
}

Tensor Embedding::forward_ids(const std::vector<int64_t>& ids, const std::vector<int64_t>& shape) {
  for (int64_t id : ids) {
    if (id < 0 || id >= num_) throw std::out_of_range(fmt::format("{}: index {} out of range", repr(), id));
  }
  std::vector<int64_t> out_shape = shape;
  out_shape.push_back(dim_);
  Tensor y = Tensor::empty(out_shape);
  const int64_t n = static_cast<int64_t>(ids.size());
  if (y.numel() != n * dim_) throw std::invalid_argument(fmt::format("{}: {} ids for the shape given", repr(), n));
  nn::embedding_forward(ids.data(), n, weight.data(), dim_, y.data());
  ids_ = ids;
  count_use(weight, *this);
  return y;
}

Tensor Embedding::forward(const Tensor&) { throw std::logic_error(repr() + " takes token ids (forward_ids)"); }

Tensor Embedding::backward(const Tensor& grad_out, bool, std::vector<Parameter*>& ready) {
  const int64_t n = static_cast<int64_t>(ids_.size());
  if (float* g = direct_grad(weight, *this)) {
    nn::embedding_backward(grad_out.data(), ids_.data(), n, num_, dim_, g);
    grad_written(weight, *this, ready);
  } else {
    scratch_.resize(static_cast<size_t>(weight.numel()));
    nn::embedding_backward(grad_out.data(), ids_.data(), n, num_, dim_, scratch_.data());
    add_grad(weight, *this, scratch_.data(), ready);
  }
  return Tensor();
}

std::string Embedding::repr() const { return fmt::format("Embedding({}, {})", num_, dim_); }

}  // namespace ddplab
