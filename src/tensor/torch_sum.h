// tensor.sum(0) of a contiguous float32 [rows, cols] tensor, added in exactly the order PyTorch's CPU
// cascade_sum (aten/src/ATen/native/cpu/SumKernel.cpp) adds, for L-lane vectors (L = 8 under AVX2, 16 under
// AVX512: cpu_capability.h, the kernels torch picks on this machine):
//   cols == 1   a contiguous inner reduction: L-lane vectors summed with 4-way ILP and the cascade, the
//               scalar tail, then the L lanes left to right (fewer than L values: the scalar row_sum);
//   cols >= L   vectorized_outer_sum: blocks of 4L columns by multi_row_sum (a 4-level cascade over the
//               rows), blocks of L by row_sum (rows split 4 ways, the 4 partial sums added at the end),
//               remaining columns by scalar row_sum;
//   cols < L    scalar_outer_sum: blocks of 4 columns by multi_row_sum, the rest by row_sum.
// Below 16 rows multi_row_sum is a plain running sum; row_sum is not: ((r0 + r4) + r1) + ... for 5 rows.
// One thread: PyTorch splits a reduction only above 32768 elements, which nn bias gradients do not reach.
#pragma once

#include <cstdint>

namespace ddplab {

// `lanes`: 0 for what torch picks on this machine (float_lanes(torch_cpu_capability())), or 8 or 16.
void torch_sum_dim0(const float* in, float* out, int64_t rows, int64_t cols, int64_t lanes = 0);

// What cascade_sum adds into the output for one contiguous run of n floats being reduced (the cols == 1
// case above before it is stored): n >= L vectorized_inner_sum, else the scalar row_sum.
float torch_sum_contiguous(const float* in, int64_t n, int64_t lanes = 0);

}  // namespace ddplab
