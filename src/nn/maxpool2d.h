// nn.MaxPool2d(kernel, stride=kernel, padding=0) (dilation 1, floor mode) on float32 NCHW contiguous buffers,
// bit for bit with torch 1.13 on CPU. torch 1.13's max_pool2d always runs max_pool2d_with_indices on a CPU
// dense tensor (with or without grad; no oneDNN pooling), whose kernel is cpu_max_pool
// (aten/src/ATen/native/cpu/MaxPoolKernel.cpp) and cpu_max_pool_backward.
#pragma once

#include <cstdint>

namespace ddplab::nn {

struct MaxPool2dShape {
  int64_t n, c, h, w, kernel, stride = 0, padding = 0;  // stride 0 means the kernel size, as torch's default
  int64_t step() const { return stride == 0 ? kernel : stride; }
  int64_t out_h() const { return (h + 2 * padding - kernel) / step() + 1; }
  int64_t out_w() const { return (w + 2 * padding - kernel) / step() + 1; }
};

// Empty when valid, else one line naming what is wrong (torch's checks: padding at most half the kernel,
// an output of at least 1x1).
const char* maxpool2d_check(const MaxPool2dShape& s);

// y and indices are [n, c, out_h, out_w]; an index is ih * w + iw within its plane. Per window, in row-major
// order: the first maximum; a NaN always replaces the running value, so the last NaN wins if there are any.
void maxpool2d_forward(const MaxPool2dShape& s, const float* x, float* y, int64_t* indices);

// grad_x (assigned) = 0, then grad_x[plane][indices] += grad_y in output order, plane by plane.
void maxpool2d_backward(const MaxPool2dShape& s, const int64_t* indices, const float* grad_y, float* grad_x);

}  // namespace ddplab::nn
