// The two algorithms conv2d.cc dispatches between (see conv2d.h), by name: the tests run slow_conv2d on
// shapes where torch would take oneDNN, to compare with torch run under mkldnn.flags(enabled=False).
#pragma once

#include "src/nn/conv2d.h"

namespace ddplab::nn::detail {

// aten::mkldnn_convolution / mkldnn_convolution_backward through oneDNN (conv2d_onednn.cc).
void onednn_conv2d_forward(const Conv2dShape& s, const float* x, const float* weight, const float* bias, float* y);
void onednn_conv2d_backward(const Conv2dShape& s, const float* x, const float* weight, const float* grad_y,
                            float* grad_x, float* grad_w, float* grad_b);

// aten::_slow_conv2d_forward / _slow_conv2d_backward (conv2d_slow.cc).
void slow_conv2d_forward(const Conv2dShape& s, const float* x, const float* weight, const float* bias, float* y);
void slow_conv2d_backward(const Conv2dShape& s, const float* x, const float* weight, const float* grad_y, float* grad_x,
                          float* grad_w, float* grad_b);

}  // namespace ddplab::nn::detail
