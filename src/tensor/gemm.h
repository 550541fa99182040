// Matrix products for nn.Linear through OpenBLAS's sgemm, issued with the same shapes, transposes and
// beta that PyTorch's CPU addmm / mm issue for Linear forward and backward. Same library, same call:
// where PyTorch's own result depends only on that call, ours has the same bits.
#pragma once

#include <cstdint>

namespace ddplab::gemm {

// C = A B (+ C when beta is 1), column-major as PyTorch's cpublas::gemm passes it to sgemm: alpha 1, one
// OpenBLAS thread. A row-major [r, c] tensor is a column-major [c, r] one.
void sgemm(bool transa, bool transb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc);

// at::native::cpublas's normalize_last_dims: before calling BLAS, torch rewrites the leading dimensions of
// degenerate (size-1) sides. Every port of a torch mm/bmm/conv GEMM call applies it the same way.
inline void normalize_last_dims(bool transa, bool transb, int64_t m, int64_t n, int64_t k, int64_t* lda, int64_t* ldb,
                                int64_t* ldc) {
  if (n == 1) *ldc = m;
  if (transa) {
    if (m == 1) *lda = k;
  } else if (k == 1) {
    *lda = m;
  }
  if (transb) {
    if (k == 1) *ldb = n;
  } else if (n == 1) {
    *ldb = k;
  }
}

// y[B, out] = bias + x[B, in] W[out, in]^T   (y must already hold the bias in every row; beta = 1)
void linear_forward(const float* x, const float* w, float* y, int64_t batch, int64_t in, int64_t out);
// grad_x[B, in] = grad_y[B, out] W[out, in]
void linear_grad_input(const float* grad_y, const float* w, float* grad_x, int64_t batch, int64_t in, int64_t out);
// grad_w[out, in] = grad_y[B, out]^T x[B, in]
void linear_grad_weight(const float* grad_y, const float* x, float* grad_w, int64_t batch, int64_t in, int64_t out);

}  // namespace ddplab::gemm
