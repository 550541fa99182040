// nn.Linear's products on the GPU, as a LinearKernels table (src/tensor/kernels.h):
//   reference: one thread per output element, the documented fixed order, compiled with --fmad=false, so
//              every value equals the CPU reference kernels' bit for bit;
//   fast:      cuBLAS sgemm (its own order: close to, not bitwise equal to, the CPU).
// The table stages operands host -> device -> host on every call (the host keeps the model). The
// device-pointer entry points below serve the device-resident trainer (src/nccl/gpu_trainer.h): operands in
// GPU memory, work enqueued on the caller's stream, nothing waits. Both run the same kernels and cuBLAS
// calls. Errors throw std::runtime_error naming the call.
#pragma once

#include <cstdint>

#include "src/tensor/kernels.h"

namespace ddplab {

const LinearKernels& cuda_kernels(Kernels k);

// `stream` is a cudaStream_t (nullptr: the legacy default stream). cuBLAS: one handle per process, set to
// `stream` at each call (so one thread at a time).
namespace dev {
void linear_forward(Kernels k, const float* x, const float* w, const float* bias, float* y, int64_t batch, int64_t in,
                    int64_t out, void* stream);
void linear_grad_input(Kernels k, const float* gy, const float* w, float* gx, int64_t batch, int64_t in, int64_t out,
                       void* stream);
void linear_grad_weight(Kernels k, const float* gy, const float* x, float* gw, int64_t batch, int64_t in, int64_t out,
                        void* stream);
// Both tables sum the bias gradient in the reference order (rows in order, one thread per output).
void linear_grad_bias(const float* gy, float* gb, int64_t batch, int64_t out, void* stream);
}  // namespace dev

}  // namespace ddplab
