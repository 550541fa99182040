// nn.Dropout(p) / F.dropout on CPU, bit for bit with torch 1.13 (at::dropout -> _dropout_impl in
// aten/src/ATen/native/Dropout.cpp; the fused native_dropout is taken only on CUDA).
//
// In training with 0 < p < 1 torch builds noise = empty_like(x).bernoulli_(1 - p), then noise.div_(1 - p),
// and returns x * noise; the backward is grad * noise. bernoulli_ on CPU draws one
// uniform_real_distribution<double> per element from the generator (Generator::random_double: one random64,
// i.e. two MT19937 outputs) and keeps the element when u < 1 - p. Checked here: eval, p == 0 and p == 1 draw
// nothing (p == 1 returns x * 0).
#pragma once

#include <cstdint>

#include "src/data/torch_rng.h"

namespace ddplab::nn {

// Fills noise[n] with torch's mask values: 1.0f / float(1 - p) where kept, 0 where dropped, drawing n uniforms
// from gen. Returns false, drawing nothing and leaving noise untouched, when dropout is the identity (eval,
// p == 0 or n == 0); for p == 1 the noise is all zeros, also without drawing. Throws std::invalid_argument
// unless 0 <= p <= 1, as torch does.
bool dropout_mask(float* noise, int64_t n, double p, bool train, Generator& gen = default_generator());

// y = x * noise (the forward when dropout_mask returned true; otherwise y = x).
void dropout_forward(const float* x, const float* noise, float* y, int64_t n);

// grad_x = grad_y * noise (MulBackward0; otherwise grad_x = grad_y).
void dropout_backward(const float* grad_y, const float* noise, float* grad_x, int64_t n);

}  // namespace ddplab::nn
