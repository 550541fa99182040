#include "src/nn/softmax.h"

#include "src/tensor/aten_vec.h"

namespace ddplab::nn {
namespace {

using vec::V;

#ifndef DDPLAB_SOFTMAX_BACKWARD_UNFUSED
inline V mul_add(V acc, V a, V b) { return _mm256_fmadd_ps(a, b, acc); }
#else
inline V mul_add(V acc, V a, V b) { return _mm256_add_ps(acc, _mm256_mul_ps(a, b)); }
#endif

// vec::map2_reduce_all(x * y, x + y, a, b, size) with the multiply contracted into the add.
float dot_reduce_all(const float* a, const float* b, int64_t size) {
  if (size < vec::kSize) {
    return vec::reduce_lanes(vec::Add(), _mm256_mul_ps(vec::loadu(a, size), vec::loadu(b, size)), size);
  }
  V acc = _mm256_mul_ps(vec::loadu(a), vec::loadu(b));
  int64_t d = vec::kSize;
  for (; d < size - (size % vec::kSize); d += vec::kSize) acc = mul_add(acc, vec::loadu(a + d), vec::loadu(b + d));
  if (size - d > 0)
    acc = vec::set(acc, mul_add(acc, vec::loadu(a + d, size - d), vec::loadu(b + d, size - d)), size - d);
  return vec::reduce_tree(vec::Add(), acc);
}

}  // namespace

void softmax_lastdim_forward(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* in = x + i * cols;
    float* out = y + i * cols;
    const V vmax = vec::broadcast(vec::reduce_all(vec::Max(), in, cols));
    vec::map([vmax](V v) { return vec::exp(_mm256_sub_ps(v, vmax)); }, out, in, cols);
    const float sum = vec::reduce_all(vec::Add(), out, cols);
    const V vscale = vec::broadcast(1 / sum);
    vec::map([vscale](V v) { return _mm256_mul_ps(v, vscale); }, out, out, cols);
  }
}

void softmax_lastdim_backward(const float* grad_y, const float* y, float* grad_x, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* g = grad_y + i * cols;
    const float* out = y + i * cols;
    const V vsum = vec::broadcast(dot_reduce_all(g, out, cols));
    vec::map2([vsum](V gv, V yv) { return _mm256_mul_ps(_mm256_sub_ps(gv, vsum), yv); }, grad_x + i * cols, g, out,
              cols);
  }
}

}  // namespace ddplab::nn
