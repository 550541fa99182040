// nn.Linear's products on the GPU, as a LinearKernels table (src/kernels.h):
//   reference: one thread per output element, the documented fixed order, compiled with --fmad=false, so
//              every value equals the CPU reference kernels' bit for bit;
//   fast:      cuBLAS sgemm (its own order: close to, not bitwise equal to, the CPU).
// Operands are staged host -> device -> host on every call: the host keeps the model (the same Parameter
// objects the Gloo path uses), the GPU does the arithmetic. Errors throw std::runtime_error naming the call.
#pragma once

#include "src/kernels.h"

namespace ddplab::verify {

const LinearKernels& cuda_kernels(Kernels k);

}  // namespace ddplab::verify
