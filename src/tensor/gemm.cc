#include "src/tensor/gemm.h"

#include <mutex>

// CBLAS, as libopenblas.so.0 exports it (values from the CBLAS standard).
extern "C" {
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };
void cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
void openblas_set_num_threads(int n);
}

namespace ddplab::gemm {
namespace {

// One thread per call, as PyTorch's order needs it pinned: the simulator runs replicas side by side on its
// own threads (--threads) instead, each calling sgemm single-threaded.
void once() {
  static std::once_flag flag;
  std::call_once(flag, [] { openblas_set_num_threads(1); });
}

}  // namespace

// PyTorch's cpublas::gemm is column-major; a row-major [r, c] tensor is a column-major [c, r] one.
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
           float beta, float* c, int64_t ldc) {
  once();
  cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

void linear_forward(const float* x, const float* w, float* y, int64_t batch, int64_t in, int64_t out) {
  // addmm(bias, x, W.t()): C^T[out, B] = W (as col-major [in, out], transposed) . x^T (col-major [in, B]) + C^T
  sgemm(true, false, out, batch, in, w, in, x, in, 1.0f, y, out);
}

void linear_grad_input(const float* grad_y, const float* w, float* grad_x, int64_t batch, int64_t in, int64_t out) {
  // grad.mm(W): C^T[in, B] = W^T-view (col-major [in, out]) . grad^T (col-major [out, B])
  sgemm(false, false, in, batch, out, w, in, grad_y, out, 0.0f, grad_x, in);
}

void linear_grad_weight(const float* grad_y, const float* x, float* grad_w, int64_t batch, int64_t in, int64_t out) {
  // grad.t().mm(x): C^T[in, out] = x (col-major [in, B]) . grad (col-major [out, B], transposed)
  sgemm(false, true, in, out, batch, x, in, grad_y, out, 0.0f, grad_w, in);
}

}  // namespace ddplab::gemm
