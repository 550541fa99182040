// The four products of nn.Linear, behind one table so a model can run them on OpenBLAS ("fast": PyTorch's
// own calls, see gemm.h), on plain loops whose order of additions is fixed and documented ("reference"),
// or on a GPU (src/tensor/cuda_kernels.cu implements both modes there). All tensors row-major, W is [out, in].
//
// Reference order (the CPU loops here and the GPU kernels are written to match it exactly; no fused
// multiply-add anywhere: -ffp-contract=off on the CPU, --fmad=false on the GPU):
//   y[b,o]  = (((0 + x[b,0]*W[o,0]) + x[b,1]*W[o,1]) + ... + x[b,in-1]*W[o,in-1]) + bias[o]
//   gx[b,i] = ((0 + gy[b,0]*W[0,i]) + ...) + gy[b,out-1]*W[out-1,i]
//   gW[o,i] = ((0 + gy[0,o]*x[0,i]) + ...) + gy[B-1,o]*x[B-1,i]
//   gb[o]   = ((0 + gy[0,o]) + gy[1,o]) + ... + gy[B-1,o]
// The fast table's bias gradient is PyTorch's own grad_output.sum(0) order (src/tensor/torch_sum.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddplab {

enum class Kernels { fast, reference };
const std::vector<std::string>& kernels_names();  // "fast", "reference": in the order of Kernels
Kernels parse_kernels(const std::string& s);      // throws std::invalid_argument
const char* kernels_name(Kernels k);

struct LinearKernels {
  const char* name;
  void (*forward)(const float* x, const float* w, const float* bias, float* y, int64_t batch, int64_t in, int64_t out);
  void (*grad_input)(const float* gy, const float* w, float* gx, int64_t batch, int64_t in, int64_t out);
  void (*grad_weight)(const float* gy, const float* x, float* gw, int64_t batch, int64_t in, int64_t out);
  void (*grad_bias)(const float* gy, float* gb, int64_t batch, int64_t out);
};

const LinearKernels& cpu_kernels(Kernels k);

}  // namespace ddplab
