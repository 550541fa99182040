#include "src/nn/bmm.h"

#include <algorithm>
#include <climits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "src/tensor/gemm.h"

namespace ddplab::nn {
namespace {

// computeStride (aten/src/ATen/TensorUtils.cpp): strides that let `shape` view the old layout, or nothing.
std::optional<std::vector<int64_t>> compute_stride(const std::vector<int64_t>& old_shape,
                                                   const std::vector<int64_t>& old_stride,
                                                   const std::vector<int64_t>& shape) {
  std::vector<int64_t> stride(shape.size(), 1);
  if (old_shape.empty()) return stride;
  int64_t numel = 1;
  for (const int64_t s : old_shape) numel *= s;
  if (numel == 0) return std::nullopt;  // not reached by attention's shapes; a copy is always right
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = old_stride.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    // The end of a chunk of dimensions that are contiguous with one another: the view's dims must fill it.
    if (tensor_d == 0 ||
        (old_shape[tensor_d - 1] != 1 && old_stride[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        stride[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_stride[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return stride;
}

// A 2-D strided matrix: one batch item of a StridedBatch (select(0, b)).
struct Mat {
  const float* data;
  int64_t size[2];
  int64_t stride[2];
};

Mat select(const StridedBatch& t, int64_t b) {
  return {t.data + b * t.stride[0], {t.size[1], t.size[2]}, {t.stride[1], t.stride[2]}};
}

// m.clone(at::MemoryFormat::Contiguous) into storage.
Mat contiguous(const Mat& m, std::vector<float>& storage) {
  storage.resize(static_cast<size_t>(m.size[0] * m.size[1]));
  for (int64_t i = 0; i < m.size[0]; ++i) {
    for (int64_t j = 0; j < m.size[1]; ++j) storage[i * m.size[1] + j] = m.data[i * m.stride[0] + j * m.stride[1]];
  }
  return {storage.data(), {m.size[0], m.size[1]}, {m.size[1], 1}};
}

// addmm_impl_cpu_(r, r, m1, m2, beta 0, alpha 1) with r a contiguous [rows, cols] matrix: the roles and
// transposes it derives from the strides, then cpublas::gemm.
void addmm_item(float* r, int64_t rows, int64_t cols, Mat m1, Mat m2, std::vector<float>& scratch_a,
                std::vector<float>& scratch_b) {
  const int64_t r_size[2] = {rows, cols}, r_stride[2] = {cols, 1};
  bool transpose_c;
  if (r_stride[0] == 1 && (r_size[1] == 1 || r_stride[1] >= std::max<int64_t>(1, r_size[0]))) {
    transpose_c = false;
  } else {  // a contiguous result always qualifies here (the third, copying branch is never taken)
    std::swap(m1, m2);
    transpose_c = true;
  }
  const int tc0 = transpose_c ? 1 : 0, tc1 = transpose_c ? 0 : 1;
  const int64_t m = r_size[tc0], n = r_size[tc1], k = m1.size[tc1];

  bool transpose_a;
  Mat a = m1;
  if (m1.stride[tc0] == 1 && m1.stride[tc1] >= std::max<int64_t>(1, m)) {
    transpose_a = false;
  } else if (m1.stride[tc1] == 1 && m1.stride[tc0] >= std::max<int64_t>(1, k)) {
    transpose_a = true;
  } else {
    transpose_a = !transpose_c;
    a = contiguous(m1, scratch_a);
  }
  bool transpose_b;
  Mat b = m2;
  if (m2.stride[tc0] == 1 && m2.stride[tc1] >= std::max<int64_t>(1, k)) {
    transpose_b = false;
  } else if (m2.stride[tc1] == 1 && m2.stride[tc0] >= std::max<int64_t>(1, n)) {
    transpose_b = true;
  } else {
    transpose_b = !transpose_c;
    b = contiguous(m2, scratch_b);
  }
  int64_t lda = a.stride[transpose_a == transpose_c ? 1 : 0];
  int64_t ldb = b.stride[transpose_b == transpose_c ? 1 : 0];
  int64_t ldc = r_stride[transpose_c ? 0 : 1];

  // cpublas::gemm: internal::normalize_last_dims, then sgemm when use_blas_gemm holds (it always does for
  // the leading dimensions chosen above).
  gemm::normalize_last_dims(transpose_a, transpose_b, m, n, k, &lda, &ldb, &ldc);
  if (std::max({m, n, k, lda, ldb, ldc}) > INT_MAX || lda < std::max<int64_t>(1, transpose_a ? k : m) ||
      ldb < std::max<int64_t>(1, transpose_b ? n : k) || ldc < std::max<int64_t>(1, m)) {
    throw std::invalid_argument("bmm: a matrix product that torch would not hand to BLAS (m=" + std::to_string(m) +
                                " n=" + std::to_string(n) + " k=" + std::to_string(k) + ")");
  }
  gemm::sgemm(transpose_a, transpose_b, m, n, k, a.data, lda, b.data, ldb, 0.0f, r, ldc);
}

}  // namespace

StridedBatch reshape_3d(const float* data, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                        const int64_t shape[3], std::vector<float>& storage) {
  StridedBatch out;
  out.data = data;
  for (int d = 0; d < 3; ++d) out.size[d] = shape[d];
  const std::vector<int64_t> new_shape(shape, shape + 3);
  if (const auto stride = compute_stride(sizes, strides, new_shape)) {
    for (int d = 0; d < 3; ++d) out.stride[d] = (*stride)[d];
    return out;
  }
  // clone(at::MemoryFormat::Contiguous): elements in row-major order of the old shape.
  int64_t numel = 1;
  for (const int64_t s : sizes) numel *= s;
  storage.resize(static_cast<size_t>(numel));
  if (sizes.size() == 4) {  // attention's [B, nh, T, hs] views: plain loops (the index walk below is slower)
    float* dst = storage.data();
    for (int64_t i0 = 0; i0 < sizes[0]; ++i0) {
      for (int64_t i1 = 0; i1 < sizes[1]; ++i1) {
        for (int64_t i2 = 0; i2 < sizes[2]; ++i2) {
          const float* src = data + i0 * strides[0] + i1 * strides[1] + i2 * strides[2];
          for (int64_t i3 = 0; i3 < sizes[3]; ++i3) *dst++ = src[i3 * strides[3]];
        }
      }
    }
  } else {
    std::vector<int64_t> index(sizes.size(), 0);
    for (int64_t i = 0; i < numel; ++i) {
      int64_t offset = 0;
      for (size_t d = 0; d < sizes.size(); ++d) offset += index[d] * strides[d];
      storage[static_cast<size_t>(i)] = data[offset];
      for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
        if (++index[d] < sizes[d]) break;
        index[d] = 0;
      }
    }
  }
  out.data = storage.data();
  out.stride[0] = shape[1] * shape[2];
  out.stride[1] = shape[2];
  out.stride[2] = 1;
  return out;
}

StridedBatch transpose12(const StridedBatch& t) {
  StridedBatch out = t;
  std::swap(out.size[1], out.size[2]);
  std::swap(out.stride[1], out.stride[2]);
  return out;
}

void bmm(const StridedBatch& a, const StridedBatch& b, float* out) {
  const int64_t bs = a.size[0], rows = a.size[1], contraction = a.size[2], cols = b.size[2];
  if (b.size[0] != bs || b.size[1] != contraction) {
    throw std::invalid_argument("bmm: batch1 [" + std::to_string(bs) + ", " + std::to_string(rows) + ", " +
                                std::to_string(contraction) + "] and batch2 [" + std::to_string(b.size[0]) + ", " +
                                std::to_string(b.size[1]) + ", " + std::to_string(cols) + "] do not multiply");
  }
  if (bs * rows * cols == 0) return;
  if (contraction == 0) {
    std::fill(out, out + bs * rows * cols, 0.0f);
    return;
  }
  if (contraction * rows * cols < 400) {  // baddbmm_cpu_kernel<float, is_bmm = true>
    for (int64_t n = 0; n < bs; ++n) {
      const float* pa = a.data + n * a.stride[0];
      const float* pb = b.data + n * b.stride[0];
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          float acc = 0;
          for (int64_t k = 0; k < contraction; ++k) {
            acc += pa[i * a.stride[1] + k * a.stride[2]] * pb[k * b.stride[1] + j * b.stride[2]];
          }
          out[(n * rows + i) * cols + j] = acc;
        }
      }
    }
    return;
  }
  std::vector<float> scratch_a, scratch_b;
  for (int64_t n = 0; n < bs; ++n)
    addmm_item(out + n * rows * cols, rows, cols, select(a, n), select(b, n), scratch_a, scratch_b);
}

}  // namespace ddplab::nn
