// Losses with explicit gradients: nn.MSELoss() and nn.CrossEntropyLoss() (reduction='mean').
#pragma once

#include <cstdint>
#include <vector>

#include "src/tensor/tensor.h"

namespace ddplab {

struct LossResult {
  float loss;
  Matrix grad;  // d loss / d input, same shape as the input
};

// mean((input - target)^2) with PyTorch's cascade sum; grad = (input - target) * float(2 / numel), as
// mse_loss_backward computes it.
LossResult mse_loss(const Matrix& input, const Matrix& target, float grad_output = 1.0f);

// -mean_i log_softmax(input)[i, target[i]]; grad = (softmax - one_hot(target)) / batch, for d loss =
// grad_output (nll_loss_backward's -(grad_output / total_weight): 1/K when the loss was divided by K).
LossResult cross_entropy(const Matrix& input, const std::vector<int64_t>& target, float grad_output = 1.0f);

// F.cross_entropy(input, target) with float targets of input's shape (class probabilities):
// -mean_i sum_c target[i,c] * log_softmax(input)[i,c]; grad = (softmax * sum_c target - target) / batch.
// With a single column log_softmax is exactly 0: the loss is 0 and every gradient exactly 0.
LossResult cross_entropy_probs(const Matrix& input, const Matrix& target, float grad_output = 1.0f);

}  // namespace ddplab
