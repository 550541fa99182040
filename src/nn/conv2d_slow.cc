// slow_conv2d as torch 1.13 runs it for a contiguous float32 input at one thread
// (aten/src/ATen/native/ConvolutionMM2d.cpp, Unfold2d.cpp, CPUBlas.cpp):
//  forward      per image: im2col into columns[c_in*k*k, oh*ow] (a 1x1/stride 1/no-padding conv uses the
//               input itself), then gemm(N, N) onto the output prefilled with the bias (beta 1) or not
//               (beta 0);
//  grad_input   per image: gemm(N, T) into fcols, then col2im adds them into the zeroed grad_input in
//               (channel, kh, kw, y, x) order;
//  grad_weight  zeroed, then per image in order gemm(T, N) with beta 1 over that image's columns;
//  grad_bias    grad_output.sum((0, 2, 3)) by ATen's sum kernel (see bias_grad below).
// cpublas::gemm is column-major and calls the Fortran sgemm_, as we do.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "src/tensor/gemm.h"
#include "src/nn/conv2d_impl.h"
#include "src/tensor/torch_sum.h"

extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
            const int* ldc);
void openblas_set_num_threads(int n);
}

namespace ddplab::nn::detail {
namespace {

// at::native::cpublas::gemm for float: normalize_last_dims, then BLAS.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float beta, float* c, int64_t ldc) {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });  // one thread per call, as in src/tensor/gemm.cc
  gemm::normalize_last_dims(ta, tb, m, n, k, &lda, &ldb, &ldc);
  const char tra = ta ? 't' : 'n', trb = tb ? 't' : 'n';
  const int m_ = static_cast<int>(m), n_ = static_cast<int>(n), k_ = static_cast<int>(k);
  const int lda_ = static_cast<int>(lda), ldb_ = static_cast<int>(ldb), ldc_ = static_cast<int>(ldc);
  const float alpha = 1.0f;
  sgemm_(&tra, &trb, &m_, &n_, &k_, &alpha, a, &lda_, b, &ldb_, &beta, c, &ldc_);
}

bool is_identity_unfold(const Conv2dShape& s) { return s.kernel == 1 && s.stride == 1 && s.padding == 0; }

// unfolded2d_copy: columns[(c, kh, kw), (y, x)] = input[c, y*stride - pad + kh, x*stride - pad + kw] or 0.
void im2col(const Conv2dShape& s, const float* in, float* cols) {
  const int64_t oh = s.out_h(), ow = s.out_w(), k = s.kernel;
  for (int64_t c = 0; c < s.c_in; ++c) {
    for (int64_t kh = 0; kh < k; ++kh) {
      for (int64_t kw = 0; kw < k; ++kw) {
        float* dst = cols + ((c * k + kh) * k + kw) * oh * ow;
        for (int64_t y = 0; y < oh; ++y) {
          const int64_t iy = y * s.stride - s.padding + kh;
          for (int64_t x = 0; x < ow; ++x) {
            const int64_t ix = x * s.stride - s.padding + kw;
            const bool inside = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
            dst[y * ow + x] = inside ? in[(c * s.h + iy) * s.w + ix] : 0.0f;
          }
        }
      }
    }
  }
}

// unfolded2d_acc: grad_in[c, iy, ix] += fcols[(c, kh, kw), (y, x)], one add per element, kh then kw
// outermost (the order that decides the bits), then y, x.
void col2im_add(const Conv2dShape& s, const float* fcols, float* grad_in) {
  const int64_t oh = s.out_h(), ow = s.out_w(), k = s.kernel;
  for (int64_t c = 0; c < s.c_in; ++c) {
    float* dst = grad_in + c * s.h * s.w;
    for (int64_t kh = 0; kh < k; ++kh) {
      for (int64_t kw = 0; kw < k; ++kw) {
        const float* src = fcols + ((c * k + kh) * k + kw) * oh * ow;
        for (int64_t y = 0; y < oh; ++y) {
          const int64_t iy = y * s.stride - s.padding + kh;
          if (iy < 0 || iy >= s.h) continue;
          for (int64_t x = 0; x < ow; ++x) {
            const int64_t ix = x * s.stride - s.padding + kw;
            if (ix < 0 || ix >= s.w) continue;
            dst[iy * s.w + ix] = dst[iy * s.w + ix] + src[y * ow + x];
          }
        }
      }
    }
  }
}

// at::sum_out(grad_bias, grad_output, {0, 2, 3}). TensorIterator drops size-1 dims, coalesces h*w (and n
// when c_out is 1), and puts the reduced dims innermost: (h*w, n) under each output channel. cascade_sum
// then sums each image's contiguous h*w run (vectorized_inner_sum, or the scalar row_sum below 8) and
// adds the images' sums into the output one after the other. With h*w == 1 the reduction is over n
// with stride c_out, the [n, c_out].sum(0) case.
void bias_grad(const Conv2dShape& s, const float* gy, float* gb) {
  const int64_t hw = s.out_h() * s.out_w();
  if (hw == 1) {
    torch_sum_dim0(gy, gb, s.n, s.c_out);
  } else if (s.c_out == 1) {
    gb[0] = 0.0f + torch_sum_contiguous(gy, s.n * hw);
  } else {
    for (int64_t c = 0; c < s.c_out; ++c) {
      float acc = 0.0f;
      for (int64_t i = 0; i < s.n; ++i) acc = acc + torch_sum_contiguous(gy + (i * s.c_out + c) * hw, hw);
      gb[c] = acc;
    }
  }
}

}  // namespace

void slow_conv2d_forward(const Conv2dShape& s, const float* x, const float* weight, const float* bias, float* y) {
  const int64_t ohw = s.out_h() * s.out_w(), ckk = s.c_in * s.kernel * s.kernel;
  const bool identity = is_identity_unfold(s);
  std::vector<float> cols(identity ? 0 : static_cast<size_t>(ckk * ohw));
  for (int64_t i = 0; i < s.n; ++i) {
    const float* in = x + i * s.c_in * s.h * s.w;
    float* out = y + i * s.c_out * ohw;
    if (bias) {
      for (int64_t c = 0; c < s.c_out; ++c) std::fill(out + c * ohw, out + (c + 1) * ohw, bias[c]);
    }
    const float* columns = in;
    if (!identity) {
      im2col(s, in, cols.data());
      columns = cols.data();
    }
    // out^T[ohw, c_out] = columns^T[ohw, ckk] weight^T[ckk, c_out], all column-major.
    gemm(false, false, ohw, s.c_out, ckk, columns, ohw, weight, ckk, bias ? 1.0f : 0.0f, out, ohw);
  }
}

void slow_conv2d_backward(const Conv2dShape& s, const float* x, const float* weight, const float* grad_y, float* grad_x,
                          float* grad_w, float* grad_b) {
  const int64_t ohw = s.out_h() * s.out_w(), ckk = s.c_in * s.kernel * s.kernel, chw = s.c_in * s.h * s.w;
  if (grad_x) {
    std::fill(grad_x, grad_x + s.n * chw, 0.0f);
    std::vector<float> fcols(static_cast<size_t>(ckk * ohw));
    for (int64_t i = 0; i < s.n; ++i) {
      // fcols^T[ohw, ckk] = grad_y_i^T[ohw, c_out] weight[c_out, ckk]
      gemm(false, true, ohw, ckk, s.c_out, grad_y + i * s.c_out * ohw, ohw, weight, ckk, 0.0f, fcols.data(), ohw);
      col2im_add(s, fcols.data(), grad_x + i * chw);
    }
  }
  if (grad_b) bias_grad(s, grad_y, grad_b);
  if (grad_w) {
    std::fill(grad_w, grad_w + s.c_out * ckk, 0.0f);
    const bool identity = is_identity_unfold(s);
    std::vector<float> cols(identity ? 0 : static_cast<size_t>(ckk * ohw));
    for (int64_t i = 0; i < s.n; ++i) {
      const float* columns = x + i * chw;
      if (!identity) {
        im2col(s, x + i * chw, cols.data());
        columns = cols.data();
      }
      // grad_w^T[ckk, c_out] += columns[ckk, ohw] grad_y_i^T[ohw, c_out]
      gemm(true, false, ckk, s.c_out, ohw, columns, ohw, grad_y + i * s.c_out * ohw, ohw, 1.0f, grad_w, ckk);
    }
  }
}

}  // namespace ddplab::nn::detail
