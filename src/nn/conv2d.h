// nn.Conv2d (groups 1, dilation 1, square kernel, symmetric padding) on float32 NCHW contiguous buffers,
// llm.c style: plain forward/backward functions over explicit buffers, bit for bit with Debian's torch 1.13
// on CPU at one thread.
//
// torch picks the algorithm per call (use_mkldnn() in aten/src/ATen/native/Convolution.cpp) and so do we:
//  - oneDNN (aten::mkldnn_convolution through ideep): the same libdnnl.so.2 (2.6.3) torch links, asked
//    with ideep's descriptors (conv2d_onednn.cc);
//  - slow_conv2d (aten/src/ATen/native/ConvolutionMM2d.cpp): im2col + OpenBLAS sgemm, bias gradient by
//    torch's sum over (0, 2, 3) (conv2d_slow.cc).
// Both are exact for the shapes each applies to; the choice depends on the batch size, so one layer can
// take both paths in one run (a final partial batch).
#pragma once

#include <cstdint>

#include "src/data/torch_rng.h"

namespace ddplab::nn {

struct Conv2dShape {
  int64_t n, c_in, h, w, c_out, kernel, stride = 1, padding = 0;
  bool bias = true;
  int64_t out_h() const { return (h + 2 * padding - kernel) / stride + 1; }
  int64_t out_w() const { return (w + 2 * padding - kernel) / stride + 1; }
};

// Empty when the shape is valid, else one line naming what is wrong (torch's own checks).
const char* conv2d_check(const Conv2dShape& s);

// True where torch 1.13 at one thread runs aten::mkldnn_convolution (oneDNN), false where slow_conv2d.
bool conv2d_uses_onednn(const Conv2dShape& s);

// y[n, c_out, out_h, out_w] = conv(x[n, c_in, h, w], weight[c_out, c_in, k, k]) + bias (bias may be null
// only when !s.bias).
void conv2d_forward(const Conv2dShape& s, const float* x, const float* weight, const float* bias, float* y);

// Gradients of conv2d_forward given grad_y, assigned (the caller accumulates). A null grad_x or grad_b is
// not computed, as torch's output_mask skips them (grad_x of a first layer, a bias that is not trained);
// grad_b is only computed when s.bias. oneDNN is asked for the primitive torch asks for: weights gradient
// with diff_bias exactly when grad_b is wanted (on the shapes tried, grad_w had the same bits either way).
void conv2d_backward(const Conv2dShape& s, const float* x, const float* weight, const float* grad_y, float* grad_x,
                     float* grad_w, float* grad_b);

// nn.Conv2d.reset_parameters: weight kaiming_uniform_(a=sqrt(5)) with fan_in = c_in*k*k, then the bias
// uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) when s.bias (bias may be null otherwise).
void conv2d_reset_parameters(Generator& gen, const Conv2dShape& s, float* weight, float* bias);

}  // namespace ddplab::nn
