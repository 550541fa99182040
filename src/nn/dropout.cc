#include "src/nn/dropout.h"

#include <stdexcept>
#include <string>

namespace ddplab::nn {

bool dropout_mask(float* noise, int64_t n, double p, bool train, Generator& gen) {
  if (!(p >= 0 && p <= 1)) {
    throw std::invalid_argument("dropout probability has to be between 0 and 1, but got " + std::to_string(p));
  }
  if (p == 0 || !train || n == 0) return false;
  if (p == 1) {  // multiply(input, zeros({})): no draw
    for (int64_t i = 0; i < n; ++i) noise[i] = 0.0f;
    return true;
  }
  const double keep = 1 - p;
  // bernoulli_(keep) writes float(u < keep); div_(1 - p) divides by the scalar converted to float.
  const float scale = 1.0f / static_cast<float>(keep);
  for (int64_t i = 0; i < n; ++i) noise[i] = gen.random_double() < keep ? scale : 0.0f;
  return true;
}

void dropout_forward(const float* x, const float* noise, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * noise[i];
}

void dropout_backward(const float* grad_y, const float* noise, float* grad_x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) grad_x[i] = grad_y[i] * noise[i];
}

}  // namespace ddplab::nn
