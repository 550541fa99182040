// The element-wise steps of the device-resident trainer (src/nccl/gpu_trainer.cu), each the CUDA twin of
// a host loop: ReLU (src/model/linear.cc), MSE (src/train/loss.cc), autograd's accumulation (src/tensor/tensor.h), the Reducer's
// bucket copies (src/ddp/reducer.cc), SGD and Adam (src/train/optim.cc). Compiled with --fmad=false and IEEE
// division and square root, so a multiply-add is fused exactly where the host writes std::fma.
// Pointers are device memory; `stream` is a cudaStream_t; nothing waits. Errors throw std::runtime_error.
#pragma once

#include <cstddef>

namespace ddplab::dist::gpu {

// h.cwiseMax(0): out = h < 0 ? 0 : h (std::max's order: NaN and -0 pass through, as on the host).
void relu_forward(const float* pre, float* out, size_t n, void* stream);
// threshold_backward: g = pre > 0 ? g : 0.
void relu_backward(const float* pre, float* g, size_t n, void* stream);
// mse_loss: d = out - y; grad = d * grad_scale (= float(2.0 / n)); *loss = sum(d * d) / float(n).
// The sum is one block's fixed tree, not PyTorch's cascade: logged losses are close to, not bitwise
// equal to, the host's (only they; the gradient is exact).
void mse(const float* out, const float* y, float* grad, float* loss, size_t n, float grad_scale, void* stream);
// autograd accumulating into an existing .grad: a = a + b.
void add(float* a, const float* b, size_t n, void* stream);
// prepare_bucket: dst = src * scale (float(1 / world_size)).
void scale_copy(float* dst, const float* src, size_t n, float scale, void* stream);
// finalize_bucket with postdivide: a = a / d.
void divide(float* a, size_t n, float d, void* stream);
// Device-to-device copy on the stream.
void copy(float* dst, const float* src, size_t n, void* stream);

// SGD without momentum: p.add_(grad, alpha=-lr), i.e. p = fma(g, -lr, p).
void sgd(float* p, const float* g, size_t n, float neg_lr, void* stream);
// SGD with momentum: buf = g (first step) or fma(g, 1 - dampening, buf * momentum); p = fma(buf, -lr, p).
void sgd_momentum(float* p, const float* g, float* buf, size_t n, bool first, float momentum, float one_minus_dampening,
                  float neg_lr, void* stream);

// The scalars Adam::step computes on the host (doubles rounded to float), for one step count.
struct AdamScalars {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, neg_step_size, bias_correction2_sqrt, eps;
};
// m = fma(g, 1-b1, m*b1); v = fma((1-b2)*g, g, v*b2); p = p + neg_step_size*m / (sqrt(v)/bc2_sqrt + eps).
void adam(float* p, const float* g, float* m, float* v, size_t n, const AdamScalars& s, void* stream);

}  // namespace ddplab::dist::gpu
