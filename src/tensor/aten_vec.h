// The pieces of ATen's AVX2 Vectorized<float> (aten/src/ATen/cpu/vec/vec256/vec256_float.h) and its
// vec::functional helpers (functional_base.h) that torch 1.13's CPU kernels are written with, so that ddplab
// can add, reduce and exponentiate in exactly their order: 8 lanes, partial loads padded with zeros, the
// shuffle-tree horizontal reduction, and SLEEF 3.5.1's u10 functions (the library torch links).
// These are the AVX2 kernels (ATEN_CPU_CAPABILITY=avx2); torch's AVX-512 kernels (16 lanes) give other bits.
#pragma once

#include <immintrin.h>
#include <sleef.h>

#include <cstdint>
#include <cstring>

namespace ddplab::vec {

using V = __m256;
inline constexpr int64_t kSize = 8;  // Vectorized<float>::size() under AVX2

// Vectorized<float>::loadu(ptr, count): the first count lanes, zeros after.
inline V loadu(const float* p, int64_t count = kSize) {
  if (count == kSize) return _mm256_loadu_ps(p);
  alignas(32) float tmp[kSize] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(tmp, p, static_cast<size_t>(count) * sizeof(float));
  return _mm256_load_ps(tmp);
}

// Vectorized<float>::store(ptr, count).
inline void store(float* p, V v, int64_t count = kSize) {
  if (count == kSize) return _mm256_storeu_ps(p, v);
  alignas(32) float tmp[kSize];
  _mm256_store_ps(tmp, v);
  std::memcpy(p, tmp, static_cast<size_t>(count) * sizeof(float));
}

// Vectorized<float>::set(a, b, count): b's first count lanes, a's after.
inline V set(V a, V b, int64_t count) {
  alignas(32) float ta[kSize], tb[kSize];
  _mm256_store_ps(ta, a);
  _mm256_store_ps(tb, b);
  for (int64_t i = 0; i < count; ++i) ta[i] = tb[i];
  return _mm256_load_ps(ta);
}

inline V broadcast(float x) { return _mm256_set1_ps(x); }
inline float first(V v) { return _mm256_cvtss_f32(v); }

// vec::maximum: _mm256_max_ps, with NaN propagated from either side.
inline V maximum(V a, V b) { return _mm256_or_ps(_mm256_max_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q)); }

// Vectorized<float>::exp / log / tanh.
inline V exp(V x) { return Sleef_expf8_u10(x); }
inline V log(V x) { return Sleef_logf8_u10(x); }
inline V tanh(V x) { return Sleef_tanhf8_u10(x); }

struct Add {
  V operator()(V a, V b) const { return _mm256_add_ps(a, b); }
};
struct Max {
  V operator()(V a, V b) const { return maximum(a, b); }
};

// vec_reduce_all(op, acc) on AVX2 (VecReduceAllSIMD<float>): halves, then pairs, then neighbours.
template <class Op>
float reduce_tree(Op op, V v) {
  v = op(v, _mm256_permute2f128_ps(v, v, 0x1));
  v = op(v, _mm256_shuffle_ps(v, v, 0x4E));
  v = op(v, _mm256_shuffle_ps(v, v, 0xB1));
  return first(v);
}

// vec_reduce_all(op, acc, size) with size < 8: lane 0 combined with lanes 1..size-1 one at a time.
template <class Op>
float reduce_lanes(Op op, V acc, int64_t size) {
  alignas(32) float lanes[kSize];
  _mm256_store_ps(lanes, acc);
  for (int64_t i = 1; i < size; ++i) acc = op(acc, _mm256_setr_ps(lanes[i], 0, 0, 0, 0, 0, 0, 0));
  return first(acc);
}

// vec::map_reduce_all(map, red, data, size); vec::reduce_all is map = identity.
template <class Map, class Op>
float map_reduce_all(Map map, Op red, const float* data, int64_t size) {
  if (size < kSize) return reduce_lanes(red, map(loadu(data, size)), size);
  V acc = map(loadu(data));
  int64_t d = kSize;
  for (; d < size - (size % kSize); d += kSize) acc = red(acc, map(loadu(data + d)));
  if (size - d > 0) acc = set(acc, red(acc, map(loadu(data + d, size - d))), size - d);
  return reduce_tree(red, acc);
}

template <class Op>
float reduce_all(Op red, const float* data, int64_t size) {
  return map_reduce_all([](V x) { return x; }, red, data, size);
}

// vec::map(f, out, in, size) and vec::map2(f, out, in1, in2, size): whole vectors, then one partial vector.
template <class F>
void map(F f, float* out, const float* in, int64_t size) {
  int64_t d = 0;
  for (; d < size - (size % kSize); d += kSize) store(out + d, f(loadu(in + d)));
  if (size - d > 0) store(out + d, f(loadu(in + d, size - d)), size - d);
}

template <class F>
void map2(F f, float* out, const float* in1, const float* in2, int64_t size) {
  int64_t d = 0;
  for (; d < size - (size % kSize); d += kSize) store(out + d, f(loadu(in1 + d), loadu(in2 + d)));
  if (size - d > 0) store(out + d, f(loadu(in1 + d, size - d), loadu(in2 + d, size - d)), size - d);
}

}  // namespace ddplab::vec
