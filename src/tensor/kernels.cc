#include "src/tensor/kernels.h"

#include <stdexcept>

#include "src/tensor/gemm.h"
#include "src/tensor/torch_sum.h"

namespace ddplab {

const std::vector<std::string>& kernels_names() {
  static const std::vector<std::string> names = {"fast", "reference"};
  return names;
}

Kernels parse_kernels(const std::string& s) {
  for (size_t i = 0; i < kernels_names().size(); ++i) {
    if (kernels_names()[i] == s) return static_cast<Kernels>(i);
  }
  throw std::invalid_argument("unknown kernels '" + s + "'");
}

const char* kernels_name(Kernels k) { return kernels_names()[static_cast<size_t>(k)].c_str(); }

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

// The reference kernels: every output element is one dot product summed serially from k = 0 in float32,
// an order any device can repeat (the CUDA kernels run the same loops).
float serial_dot(const float* a, int64_t a_stride, const float* b, int64_t b_stride, int64_t n) {
  float acc = 0.0f;
  for (int64_t k = 0; k < n; ++k) acc = acc + a[k * a_stride] * b[k * b_stride];
  return acc;
}

void ref_forward(const float* x, const float* w, const float* bias, float* y, int64_t batch, int64_t in, int64_t out) {
  for (int64_t b = 0; b < batch; ++b) {  // y[b, o] = x[b, :] . w[o, :], then + bias
    for (int64_t o = 0; o < out; ++o) y[b * out + o] = serial_dot(x + b * in, 1, w + o * in, 1, in) + bias[o];
  }
}

void ref_grad_input(const float* gy, const float* w, float* gx, int64_t batch, int64_t in, int64_t out) {
  for (int64_t b = 0; b < batch; ++b) {  // gx[b, i] = gy[b, :] . w[:, i]
    for (int64_t i = 0; i < in; ++i) gx[b * in + i] = serial_dot(gy + b * out, 1, w + i, in, out);
  }
}

void ref_grad_weight(const float* gy, const float* x, float* gw, int64_t batch, int64_t in, int64_t out) {
  for (int64_t o = 0; o < out; ++o) {  // gw[o, i] = gy[:, o] . x[:, i]
    for (int64_t i = 0; i < in; ++i) gw[o * in + i] = serial_dot(gy + o, out, x + i, in, batch);
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
