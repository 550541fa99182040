// The torch 1.13 CPU arithmetic powerSGD_hook runs, one function per torch call it makes, for float32 with
// one thread (ATen's AVX2 kernels, OpenBLAS through src/tensor/gemm.h): numpy's legacy randint (where the initial
// Q's seed comes from), torch.bmm of one batch item, and _orthogonalize_gram_schmidt (epsilon 0).
#pragma once

#include <cstdint>

#include "src/data/torch_rng.h"

namespace ddplab::ddp::powersgd {

// numpy.random.RandomState(seed).randint(high), the legacy bounded path (high <= 2^32): MT19937
// init_genrand(seed), each 32-bit output masked to the smallest 2^b - 1 covering high - 1, redrawn while
// above high - 1. The engine is torch's (the same init_genrand and tempering).
class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}
  int64_t randint(int64_t high);

 private:
  Generator mt_;
};

// A 2-D float32 view: element (i, j) at data[i * s0 + j * s1].
struct Matrix {
  float* data;
  int64_t rows, cols, s0, s1;
  float& at(int64_t i, int64_t j) const { return data[i * s0 + j * s1]; }
  Matrix t() const { return {data, cols, rows, s1, s0}; }  // .transpose(0, 1): a view
};

// torch.bmm(a, b, out=c) for one batch item, as bmm_out_or_baddbmm_ dispatches it: below 400
// multiply-adds (k * rows * cols) the naive loop (c = 0; c += a[i][k] * b[k][j], k ascending), otherwise
// mm_cpu_out -> addmm_impl_cpu_'s choice of transposes and leading dimensions (copying an operand that
// fits neither layout) -> cpublas::gemm's normalize_last_dims -> sgemm.
void bmm(const Matrix& a, const Matrix& b, const Matrix& c);

// _orthogonalize_gram_schmidt(m[None], epsilon=0) on a rows x cols matrix, cols <= 2, in place: each column
// divided by torch.norm(col, dim=1) (a contiguous column: the vectorised 2-norm of norm2; a strided one:
// the generic reduction, fma(x, x, acc) in order, then sqrtf), then the next column minus
// torch.sum(col * rest, dim=1) * col. An all-zero column gives NaN, as in torch.
void orthogonalize(const Matrix& m);

}  // namespace ddplab::ddp::powersgd
