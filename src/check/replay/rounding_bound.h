// The rounding bound of the whole-run steps' weighted sums (wsum_check.h, docs/trace_format.md "The weighted
// sums"), public for its tests.
#pragma once

#include <cstdint>

namespace ddplab::check {

// The bound on |sum_i w_i (R_i - E_i)| for one parameter of n elements, where R is DDP's float32 result and
// E = scale * sum_r c_r the exact one: each rank's contribution c_r accumulated from `terms` float32 additions
// of tensors whose weighted absolute sums total `abs_sum` (over every rank and term), scaled by `scale` (or
// divided by world_size after the sum), then summed over `world_size` ranks in any order:
//   gamma(m) * scale' * abs_sum  +  gamma64(n + 1100 + world_size) * 4 * scale' * abs_sum  +  2 n world_size 2^-149,
// gamma(m) = m u / (1 - m u), u = 2^-24, m = world_size + terms + 2 (the world_size - 1 additions, the scaling and
// its constant's rounding, the accumulation), scale' = scale (1 + 2^-23); the second term the float64 sums' own
// rounding, the third the underflow of scaled subnormals.
double wsum_bound(int64_t n, int64_t world_size, int64_t terms, double scale, double abs_sum);

}  // namespace ddplab::check
