// LayerNorm over the last dimension of contiguous float32 rows, bit for bit with torch 1.13 on CPU at one
// thread (F.layer_norm -> native_layer_norm; aten/src/ATen/native/cpu/layer_norm_kernel.cpp, AVX2 build).
//
// Forward (LayerNormKernelImplInternal), per row of C floats:
//   mean, var = RowwiseMoments (cpu/moments_utils.h): Welford over 8-lane vectors in chunks of 16 vectors,
//     each chunk merged into a cascade stack (pairwise, by the chunk index's trailing zero bits), the stack
//     merged bottom-up, then the C % 8 scalar tail by Welford, then the 8 lanes merged into it one by one;
//     var = m2 / C (biased);
//   rstd = 1 / sqrtf(var + eps); y = (x * rstd + (-rstd * mean)) * w + b (w = 1, b = 0 when absent), with
//     the multiply-adds fused where GCC fused torch's (see layernorm.cc).
// Backward (LayerNormBackwardKernelImplInternal), rows in order:
//   dweight and dbias: one per-thread buffer row (one thread here) accumulating dy * (rstd * x - rstd * mean)
//     and dy row after row, then 0 + buffer;
//   dx: ds = sum(dy * x * w), db = sum(dy * w) by 8-lane vector reductions (vec::map*_reduce_all), then
//     dx = rstd * dy * w + b' * x + c' with b' = (db * mean - ds) * rstd^3 / C, c' = -b' * mean - db * rstd / C.
#pragma once

#include <cstdint>

namespace ddplab::nn {

// x, y: [M, C]; weight, bias: [C] or null (absent); mean, rstd: [M] (each may be null when not wanted).
void layer_norm_forward(const float* x, const float* weight, const float* bias, float* y, float* mean, float* rstd,
                        int64_t M, int64_t C, float eps = 1e-5f);

// Writes (does not accumulate) dx [M, C], dweight [C] and dbias [C]; each may be null when not wanted.
// mean and rstd are the forward's.
void layer_norm_backward(const float* dy, const float* x, const float* mean, const float* rstd, const float* weight,
                         float* dx, float* dweight, float* dbias, int64_t M, int64_t C);

}  // namespace ddplab::nn
