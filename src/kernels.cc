#include "src/kernels.h"

#include <stdexcept>

#include "src/gemm.h"
#include "src/torch_sum.h"

namespace ddplab {

Kernels parse_kernels(const std::string& s) {
  if (s == "fast") return Kernels::fast;
  if (s == "reference") return Kernels::reference;
  throw std::invalid_argument("unknown kernels '" + s + "'");
}

const char* kernels_name(Kernels k) { return k == Kernels::fast ? "fast" : "reference"; }

namespace {

void grad_bias_rows(const float* gy, float* gb, int64_t batch, int64_t out) {
  for (int64_t o = 0; o < out; ++o) gb[o] = 0.0f;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t o = 0; o < out; ++o) gb[o] = gb[o] + gy[b * out + o];
  }
}

void fast_forward(const float* x, const float* w, const float* bias, float* y, int64_t batch, int64_t in, int64_t out) {
  for (int64_t b = 0; b < batch; ++b) {  // addmm starts from the bias (beta = 1)
    for (int64_t o = 0; o < out; ++o) y[b * out + o] = bias[o];
  }
  gemm::linear_forward(x, w, y, batch, in, out);
}

void ref_forward(const float* x, const float* w, const float* bias, float* y, int64_t batch, int64_t in, int64_t out) {
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t o = 0; o < out; ++o) {
      float acc = 0.0f;
      for (int64_t k = 0; k < in; ++k) acc = acc + x[b * in + k] * w[o * in + k];
      y[b * out + o] = acc + bias[o];
    }
  }
}

void ref_grad_input(const float* gy, const float* w, float* gx, int64_t batch, int64_t in, int64_t out) {
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < in; ++i) {
      float acc = 0.0f;
      for (int64_t o = 0; o < out; ++o) acc = acc + gy[b * out + o] * w[o * in + i];
      gx[b * in + i] = acc;
    }
  }
}

void ref_grad_weight(const float* gy, const float* x, float* gw, int64_t batch, int64_t in, int64_t out) {
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      float acc = 0.0f;
      for (int64_t b = 0; b < batch; ++b) acc = acc + gy[b * out + o] * x[b * in + i];
      gw[o * in + i] = acc;
    }
  }
}

// PyTorch's bias gradient is grad_output.sum(0) through its cascade sum.
void fast_grad_bias(const float* gy, float* gb, int64_t batch, int64_t out) { torch_sum_dim0(gy, gb, batch, out); }

const LinearKernels kFast = {"fast (OpenBLAS sgemm, PyTorch's calls)", fast_forward, gemm::linear_grad_input,
                             gemm::linear_grad_weight, fast_grad_bias};
const LinearKernels kReference = {"reference (fixed-order loops)", ref_forward, ref_grad_input, ref_grad_weight,
                                  grad_bias_rows};

}  // namespace

const LinearKernels& cpu_kernels(Kernels k) { return k == Kernels::fast ? kFast : kReference; }

}  // namespace ddplab
