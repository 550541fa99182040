#include "src/loss.h"

#include "src/torch_sum.h"

#include <cmath>
#include <stdexcept>

namespace ddplab {

LossResult mse_loss(const Matrix& input, const Matrix& target) {
  if (input.rows() != target.rows() || input.cols() != target.cols()) {
    throw std::invalid_argument("mse_loss: input and target shapes differ");
  }
  const Matrix diff = input - target;
  // (input - target).pow(2).mean(): squares in float, PyTorch's cascade sum, then one float division.
  const Matrix sq = diff.cwiseProduct(diff);
  float sum = 0.0f;
  torch_sum_dim0(sq.data(), &sum, sq.size(), 1);
  LossResult r;
  r.loss = sum / static_cast<float>(diff.size());
  r.grad = diff * static_cast<float>(2.0 / static_cast<double>(diff.size()));
  return r;
}

LossResult cross_entropy(const Matrix& input, const std::vector<int64_t>& target) {
  const Eigen::Index batch = input.rows(), classes = input.cols();
  if (static_cast<Eigen::Index>(target.size()) != batch) {
    throw std::invalid_argument("cross_entropy: one target per row is needed");
  }
  LossResult r;
  r.grad.resize(batch, classes);
  double total = 0.0;
  for (Eigen::Index i = 0; i < batch; ++i) {
    const int64_t t = target[static_cast<size_t>(i)];
    if (t < 0 || t >= classes) throw std::invalid_argument("cross_entropy: target out of range");
    const float m = input.row(i).maxCoeff();
    float s = 0.0f;
    for (Eigen::Index j = 0; j < classes; ++j) s += std::exp(input(i, j) - m);
    const float log_s = std::log(s);
    total += -(input(i, t) - m - log_s);
    for (Eigen::Index j = 0; j < classes; ++j) {
      const float p = std::exp(input(i, j) - m - log_s);
      r.grad(i, j) = (p - (j == t ? 1.0f : 0.0f)) / static_cast<float>(batch);
    }
  }
  r.loss = static_cast<float>(total / static_cast<double>(batch));
  return r;
}

LossResult cross_entropy_probs(const Matrix& input, const Matrix& target) {
  if (input.rows() != target.rows() || input.cols() != target.cols()) {
    throw std::invalid_argument("cross_entropy: probability targets must have the input's shape");
  }
  const Eigen::Index batch = input.rows(), classes = input.cols();
  LossResult r;
  r.grad.resize(batch, classes);
  double total = 0.0;
  for (Eigen::Index i = 0; i < batch; ++i) {
    const float m = input.row(i).maxCoeff();
    float s = 0.0f, tsum = 0.0f;
    for (Eigen::Index j = 0; j < classes; ++j) s += std::exp(input(i, j) - m);
    const float log_s = std::log(s);
    for (Eigen::Index j = 0; j < classes; ++j) {
      const float logp = input(i, j) - m - log_s;
      total += -static_cast<double>(target(i, j)) * logp;
      tsum += target(i, j);
    }
    for (Eigen::Index j = 0; j < classes; ++j) {
      const float p = std::exp(input(i, j) - m - log_s);
      r.grad(i, j) = (p * tsum - target(i, j)) / static_cast<float>(batch);
    }
  }
  r.loss = static_cast<float>(total / static_cast<double>(batch));
  return r;
}

}  // namespace ddplab
