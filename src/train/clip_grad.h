// torch.nn.utils.clip_grad_norm_(parameters, max_norm) with the default norm_type 2, as torch 1.13 computes
// it on CPU (float32, AVX2 kernels): the 2-norm of each gradient, the 2-norm of those norms, and every
// gradient multiplied by min(max_norm / (total + 1e-6), 1).
#pragma once

#include <cstdint>
#include <vector>

#include "src/tensor/tensor.h"

namespace ddplab {

// torch.norm(x, 2) (linalg.vector_norm) of n contiguous float32 values: 8 lanes of fma(x, x, acc) over the
// whole blocks of 8, the lanes added in order 0 + 1 + ... + 7, then the remaining n % 8 squares added one
// by one (a group of 4 as rounded squares, the last n % 4 as fma), then sqrtf.
float norm2(const float* x, int64_t n);

// Parameters without a grad are skipped. The grads are scaled in place, also when the norm is below
// max_norm (by a coefficient of 1, as torch does: no branch). Returns the total norm (0 with no grads).
// coef = float(max_norm) * (1 / (total + 1e-6f)): Python's max_norm / tensor is tensor.reciprocal() *
// max_norm; clamp(max=1) keeps a NaN, so a NaN total makes every grad NaN, as in torch.
float clip_grad_norm_(const std::vector<Parameter*>& params, double max_norm);

}  // namespace ddplab
