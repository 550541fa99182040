#include "src/ddp/hooks/powersgd_math.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "src/train/clip_grad.h"
#include "src/tensor/gemm.h"
#include "src/tensor/torch_sum.h"

namespace ddplab::ddp::powersgd {

int64_t NumpyRandomState::randint(int64_t high) {
  if (high < 1 || high > (int64_t{1} << 32))
    throw std::invalid_argument("NumpyRandomState::randint: high out of range");
  const uint32_t rng = static_cast<uint32_t>(high - 1);
  uint32_t mask = rng;  // numpy's gen_mask: all bits below the highest set one
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  uint32_t v;
  do {
    v = mt_.random() & mask;
  } while (v > rng);
  return v;
}

namespace {

// A contiguous row-major copy (Tensor.clone(at::MemoryFormat::Contiguous)).
Matrix contiguous_copy(const Matrix& m, std::vector<float>& store) {
  store.resize(static_cast<size_t>(m.rows * m.cols));
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) store[static_cast<size_t>(i * m.cols + j)] = m.at(i, j);
  return {store.data(), m.rows, m.cols, m.cols, 1};
}

// addmm_impl_cpu_(result, result, m1, m2, beta 0, alpha 1) for float32.
void addmm_impl_cpu(const Matrix& result, Matrix m1, Matrix m2) {
  const int64_t r0 = result.rows, r1 = result.cols;
  bool tc = false;
  Matrix c = result;
  std::vector<float> c_store, a_store, b_store;
  if (result.s0 == 1 && (r1 == 1 || result.s1 >= std::max<int64_t>(1, r0))) {
    tc = false;
  } else if (result.s1 == 1 && (r0 == 1 || result.s0 >= std::max<int64_t>(1, r1))) {
    std::swap(m1, m2);
    tc = true;
  } else {  // make c Fortran contiguous; its old values do not matter (beta 0)
    c_store.assign(static_cast<size_t>(r0 * r1), 0.0f);
    c = {c_store.data(), r0, r1, 1, r0};
  }
  // After the swap m1/m2 are the column-major operands: sizes [0]/[1] read through tc as torch reads them.
  const auto size = [&](const Matrix& x, int d) { return d == 0 ? x.rows : x.cols; };
  const auto stride = [&](const Matrix& x, int d) { return d == 0 ? x.s0 : x.s1; };
  const int64_t m = tc ? r1 : r0, n = tc ? r0 : r1, k = size(m1, tc ? 0 : 1);
  bool ta, tb;
  Matrix a = m1, b = m2;
  if (stride(m1, tc ? 1 : 0) == 1 && stride(m1, tc ? 0 : 1) >= std::max<int64_t>(1, m)) {
    ta = false;
  } else if (stride(m1, tc ? 0 : 1) == 1 && stride(m1, tc ? 1 : 0) >= std::max<int64_t>(1, k)) {
    ta = true;
  } else {
    ta = !tc;
    a = contiguous_copy(m1, a_store);
  }
  if (stride(m2, tc ? 1 : 0) == 1 && stride(m2, tc ? 0 : 1) >= std::max<int64_t>(1, k)) {
    tb = false;
  } else if (stride(m2, tc ? 0 : 1) == 1 && stride(m2, tc ? 1 : 0) >= std::max<int64_t>(1, n)) {
    tb = true;
  } else {
    tb = !tc;
    b = contiguous_copy(m2, b_store);
  }
  int64_t lda = stride(a, ta == tc ? 1 : 0), ldb = stride(b, tb == tc ? 1 : 0), ldc = stride(c, tc ? 0 : 1);
  // cpublas::gemm's normalize_last_dims: leading dimensions of degenerate (size-1) sides are rewritten.
  gemm::normalize_last_dims(ta, tb, m, n, k, &lda, &ldb, &ldc);
  // cpublas::gemm hands these to BLAS only when they are valid; otherwise it runs its own loops, which this
  // port does not have (PowerSGD's contiguous views always qualify).
  if (lda < std::max<int64_t>(1, ta ? k : m) || ldb < std::max<int64_t>(1, tb ? n : k) || ldc < std::max<int64_t>(1, m))
    throw std::logic_error("powersgd bmm: leading dimensions torch would not pass to BLAS");
  gemm::sgemm(ta, tb, m, n, k, a.data, lda, b.data, ldb, 0.0f, c.data, ldc);
  if (c.data != result.data) {
    for (int64_t i = 0; i < r0; ++i)
      for (int64_t j = 0; j < r1; ++j) result.at(i, j) = c.at(i, j);
  }
}

}  // namespace

void bmm(const Matrix& a, const Matrix& b, const Matrix& c) {
  if (a.cols != b.rows || c.rows != a.rows || c.cols != b.cols) throw std::logic_error("powersgd bmm: shapes");
  if (c.rows * c.cols == 0) return;
  if (a.cols == 0) {
    for (int64_t i = 0; i < c.rows; ++i)
      for (int64_t j = 0; j < c.cols; ++j) c.at(i, j) = 0.0f;
    return;
  }
  if (a.cols * c.rows * c.cols < 400) {  // baddbmm_cpu_kernel<float, is_bmm=true>
    for (int64_t i = 0; i < c.rows; ++i)
      for (int64_t j = 0; j < c.cols; ++j) {
        float r = 0.0f;
        for (int64_t k = 0; k < a.cols; ++k) r = r + a.at(i, k) * b.at(k, j);
        c.at(i, j) = r;
      }
    return;
  }
  addmm_impl_cpu(c, a, b);  // Debian's torch has no MKL: mm_cpu_out per batch item
}

void orthogonalize(const Matrix& m) {
  if (m.cols > 2) throw std::logic_error("powersgd: Gram-Schmidt is torch's path for rank <= 2 only");
  std::vector<float> buf(static_cast<size_t>(m.rows));
  for (int64_t i = 0; i < m.cols; ++i) {
    float norm;
    if (m.s0 == 1) {  // the column is contiguous: norm_kernel's vectorised last-dim path
      norm = norm2(&m.at(0, i), m.rows);
    } else {  // binary_kernel_reduce with NormTwoOps: acc + x * x, contracted to an fma as torch was built
      float acc = 0.0f;
      for (int64_t r = 0; r < m.rows; ++r) acc = std::fma(m.at(r, i), m.at(r, i), acc);
      norm = std::sqrt(acc);
    }
    for (int64_t r = 0; r < m.rows; ++r) m.at(r, i) = m.at(r, i) / norm;
    for (int64_t j = i + 1; j < m.cols; ++j) {
      // col * rest is a fresh contiguous (1, rows, 1) tensor: its sum over dim 1 is an inner reduction.
      for (int64_t r = 0; r < m.rows; ++r) buf[static_cast<size_t>(r)] = m.at(r, i) * m.at(r, j);
      float s;
      torch_sum_dim0(buf.data(), &s, m.rows, 1);
      for (int64_t r = 0; r < m.rows; ++r) m.at(r, j) = m.at(r, j) - s * m.at(r, i);
    }
  }
}

}  // namespace ddplab::ddp::powersgd
