#include "src/train/loss.h"

#include "src/tensor/aten_vec.h"
#include "src/tensor/torch_sum.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace ddplab {

LossResult mse_loss(const Matrix& input, const Matrix& target, float grad_output) {
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
  // mse_backward's norm * (input - target) * grad_output, left to right (grad_output 1: the same bits).
  if (grad_output != 1.0f) r.grad *= grad_output;
  return r;
}

namespace {

// log_softmax over the last dimension of a contiguous [rows, cols] tensor, as torch 1.13's
// _vec_log_softmax_lastdim computes it (cpu/SoftMaxKernel.cpp): the row's max and sum of exp(x - max) by
// 8-lane vectors (vec::reduce_all / map_reduce_all), Sleef_logf8_u10 of the sum, then (x - max) - log(sum).
void log_softmax_lastdim(const float* in, float* out, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = in + i * cols;
    const float max = vec::reduce_all(vec::Max(), x, cols);
    const vec::V vmax = vec::broadcast(max);
    const float sum =
        vec::map_reduce_all([vmax](vec::V v) { return vec::exp(_mm256_sub_ps(v, vmax)); }, vec::Add(), x, cols);
    const vec::V vlog = vec::log(vec::broadcast(sum));
    vec::map([vmax, vlog](vec::V v) { return _mm256_sub_ps(_mm256_sub_ps(v, vmax), vlog); }, out + i * cols, x, cols);
  }
}

// _log_softmax_backward_data (_vec_host_softmax_backward_lastdim<float, true>): per row,
// grad_input = grad - exp(output) * sum(grad), the sum by vec::reduce_all; GCC fuses the multiply and the
// subtraction into one FMA in torch's build (checked bit for bit).
void log_softmax_backward_lastdim(const float* grad, const float* output, float* grad_input, int64_t rows,
                                  int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const float sum = vec::reduce_all(vec::Add(), grad + i * cols, cols);
    const vec::V vsum = vec::broadcast(sum);
    vec::map2([vsum](vec::V g, vec::V y) { return _mm256_fnmadd_ps(vec::exp(y), vsum, g); }, grad_input + i * cols,
              grad + i * cols, output + i * cols, cols);
  }
}

}  // namespace

LossResult cross_entropy(const Matrix& input, const std::vector<int64_t>& target, float grad_output) {
  const int64_t batch = input.rows(), classes = input.cols();
  if (static_cast<int64_t>(target.size()) != batch) {
    throw std::invalid_argument("cross_entropy: one target per row is needed");
  }
  for (const int64_t t : target) {
    if (t < 0 || t >= classes) throw std::invalid_argument("cross_entropy: target out of range");
  }
  Matrix logp(batch, classes);
  log_softmax_lastdim(input.data(), logp.data(), batch, classes);

  // nll_loss (LossNLL.cpp nll_loss_out_frame, no weight, mean): float partial sums cascaded up every
  // 2^level_power targets, added bottom up, then divided by the count.
  constexpr int kLevels = 8;
  int64_t ceil_log2 = 0;
  while ((int64_t{1} << ceil_log2) < batch) ++ceil_log2;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2 / kLevels);
  const int64_t level_mask = (int64_t{1} << level_power) - 1;
  float partial[kLevels] = {0};
  for (int64_t b = 0; b < batch; ++b) {
    partial[0] -= logp(b, target[static_cast<size_t>(b)]);
    for (int j = 0; j + 1 < kLevels; ++j) {
      if ((b & (level_mask << (j * level_power))) != 0) break;
      partial[j + 1] += partial[j];
      partial[j] = 0;
    }
  }
  float loss = 0.0f;
  for (const float p : partial) loss += p;
  const float total_weight = static_cast<float>(batch);
  LossResult r;
  r.loss = loss / total_weight;

  // nll_loss_backward puts -(grad_output / total_weight) at each target, then the log_softmax backward.
  Matrix grad_logp = Matrix::Zero(batch, classes);
  const float g = -(grad_output / total_weight);
  for (int64_t b = 0; b < batch; ++b) grad_logp(b, target[static_cast<size_t>(b)]) = g;
  r.grad.resize(batch, classes);
  log_softmax_backward_lastdim(grad_logp.data(), logp.data(), r.grad.data(), batch, classes);
  return r;
}

LossResult cross_entropy_probs(const Matrix& input, const Matrix& target, float grad_output) {
  if (input.rows() != target.rows() || input.cols() != target.cols()) {
    throw std::invalid_argument("cross_entropy: probability targets must have the input's shape");
  }
  const int64_t batch = input.rows(), classes = input.cols();
  // cross_entropy_loss_prob_target (mean, no weight): -(log_softmax(input) * target).sum() / batch, the sum
  // by the cascade sum of a full reduction.
  Matrix logp(batch, classes);
  log_softmax_lastdim(input.data(), logp.data(), batch, classes);
  const Matrix prod = logp.cwiseProduct(target);
  float sum = 0.0f;
  torch_sum_dim0(prod.data(), &sum, prod.size(), 1);
  LossResult r;
  r.loss = -sum / static_cast<float>(batch);

  // Autograd's chain: DivBackward (grad_output / batch), NegBackward, SumBackward (expand), MulBackward
  // (* target), then the log_softmax backward.
  const float g = -(grad_output / static_cast<float>(batch));
  const Matrix grad_logp = target * g;
  r.grad.resize(batch, classes);
  log_softmax_backward_lastdim(grad_logp.data(), logp.data(), r.grad.data(), batch, classes);
  return r;
}

}  // namespace ddplab
