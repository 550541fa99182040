// Batched matrix products as torch 1.13's CPU at::matmul / at::bmm compute them for 4-D operands, over
// strided views (raw pointer, sizes, strides in elements), so that each product takes PyTorch's path:
//
// - at::matmul (LinearAlgebra.cpp _matmul_impl) on two 4-D tensors expands them (a no-op here) and reshapes
//   each to [B*H, rows, cols]: a view when the strides allow it (computeStride in TensorUtils.cpp), otherwise
//   a contiguous copy. The product is at::bmm, viewed back (_unsafe_view).
// - at::bmm (bmm_out_or_baddbmm_): when contraction * rows * cols < 400, a naive loop per output element,
//   acc += a[i][k] * b[k][j] in float over k in order (baddbmm_cpu_kernel; no FMA in that translation unit);
//   otherwise, with no MKL (Debian's torch), one addmm_impl_cpu_ per batch item: it picks the column-major
//   roles, transposes and leading dimensions from the strides (cloning an operand that is neither row- nor
//   column-major) and calls cpublas::gemm -> sgemm (OpenBLAS), beta 0.
// - BmmBackward0 (derivatives.yaml): grad_a = grad.bmm(b.transpose(1, 2)), grad_b = a.transpose(1, 2).bmm(grad),
//   with the saved operands' own strides, so the transposes reach sgemm as transa / transb flags.
// Checked bit for bit against torch through //tests:attention_test.
#pragma once

#include <cstdint>
#include <vector>

namespace ddplab::nn {

// A 3-D strided view [size0, size1, size2] of float data.
struct StridedBatch {
  const float* data = nullptr;
  int64_t size[3] = {0, 0, 0};
  int64_t stride[3] = {0, 0, 0};
};

// Tensor::reshape of an n-D strided view to the 3-D shape `shape`: a view of the same data when
// computeStride finds strides for it, else a contiguous copy written into `storage` (resized).
StridedBatch reshape_3d(const float* data, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                        const int64_t shape[3], std::vector<float>& storage);

// t.transpose(1, 2): the same data, dims 1 and 2 swapped.
StridedBatch transpose12(const StridedBatch& t);

// at::bmm(a, b) into out, contiguous [a.size0, a.size1, b.size2]. Throws std::invalid_argument on
// mismatched shapes.
void bmm(const StridedBatch& a, const StridedBatch& b, float* out);

}  // namespace ddplab::nn
