// Scalar emulation of PyTorch's AVX2 log256_ps / sincos256_ps (aten/src/ATen/native/cpu/avx_mathfun.h),
// the Cephes-style float polynomials behind torch.randn's vectorized Box-Muller.
//
// PyTorch's binary was compiled by GCC with floating-point contraction on, so some multiply-adds of those
// functions are fused. Matching PyTorch bit for bit needs exactly those fusions, written here as std::fma,
// and no other contraction anywhere (the project builds with -ffp-contract=off).
#pragma once

namespace ddplab::cephes {

float log_ps(float x);                        // natural log; x in (0, 1] for Box-Muller
void sincos_ps(float x, float* s, float* c);  // x in [0, 2*pi)

}  // namespace ddplab::cephes
