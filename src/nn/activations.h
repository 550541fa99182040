// nn.Tanh, nn.Sigmoid and nn.GELU (approximate='none' | 'tanh') on contiguous float32, forward and backward,
// bit for bit with torch 1.13's AVX2 CPU kernels at one thread:
//   tanh      UnaryOpsKernel.cpp: vml::vtanh = vec::map of Vectorized<float>::tanh (Sleef_tanhf8_u10) over
//             every element, the last n % 8 in a zero-padded vector;
//   sigmoid   UnaryOpsKernel.cpp: 1 / (1 + exp(-x)), Sleef_expf8_u10 on blocks of 16 (cpu_kernel_vec), glibc's
//             expf on the n % 16 tail;
//   gelu      approximate='none' with more than one element: oneDNN's eltwise_gelu_erf (torch's default, see
//             gelu_forward); otherwise Activation.cpp GeluKernelImpl / GeluBackwardKernelImpl: blocks of 16 with
//             Vectorized<float>::erf (Sleef_erff8_u10 in 1.13) or ::tanh (Sleef_tanhf8_u10), the n % 16 tail with
//             glibc's erff/tanhf;
//   backward  tanh_backward: g * (1 - y * y); sigmoid_backward: g * (1 - y) * y (BinaryOpsKernel.cpp), both from
//             the forward's output y.
// Torch's build lets GCC contract a * b + c into FMA inside these kernels (scalar tails included); the .cc
// writes each such fusion with an explicit FMA (-ffp-contract=off here), each one checked against torch.
#pragma once

#include <cstdint>

namespace ddplab::nn {

void tanh_forward(const float* x, float* y, int64_t n);
void tanh_backward(const float* grad_y, const float* y, float* grad_x, int64_t n);

void sigmoid_forward(const float* x, float* y, int64_t n);
void sigmoid_backward(const float* grad_y, const float* y, float* grad_x, int64_t n);

enum class GeluApproximate { kNone, kTanh };  // nn.GELU(approximate='none') / 'tanh'

// mkldnn mirrors torch.backends.mkldnn.enabled (true by default): torch 1.13 then runs approximate='none' on
// more than one element through oneDNN (Activation.cpp use_mkldnn), otherwise through ATen's kernel.
void gelu_forward(const float* x, float* y, int64_t n, GeluApproximate approximate = GeluApproximate::kNone,
                  bool mkldnn = true);
// The backward takes the forward's input x (not its output).
void gelu_backward(const float* grad_y, const float* x, float* grad_x, int64_t n,
                   GeluApproximate approximate = GeluApproximate::kNone, bool mkldnn = true);

}  // namespace ddplab::nn
