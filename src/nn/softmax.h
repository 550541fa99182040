// F.softmax(x, dim=-1) on a contiguous float32 CPU tensor and its backward, bit for bit with torch 1.13's AVX2
// kernels (aten/src/ATen/native/cpu/SoftMaxKernel.cpp):
// - forward, _vec_softmax_lastdim per row: max = vec::reduce_all(maximum), out = Sleef_expf8_u10(x - max)
//   (vec::map), sum = vec::reduce_all(+) of out, then out * (1 / sum) with the reciprocal in float.
//   A row's -inf entries give exactly 0 (exp(-inf) = 0).
// - backward, _vec_host_softmax_backward_lastdim<float, false>: sum = vec::map2_reduce_all(grad * out, +),
//   grad_input = (grad - sum) * out. GCC contracts the map's multiply into the reduction's add in torch's
//   build (acc + g * y as one FMA after the first vector), so the sum is written with FMAs (checked bit for bit).
#pragma once

#include <cstdint>

namespace ddplab::nn {

void softmax_lastdim_forward(const float* x, float* y, int64_t rows, int64_t cols);
void softmax_lastdim_backward(const float* grad_y, const float* y, float* grad_x, int64_t rows, int64_t cols);

}  // namespace ddplab::nn
