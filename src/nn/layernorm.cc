#include "src/nn/layernorm.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "src/tensor/aten_vec.h"

// Fused multiply-adds: torch's build (GCC 12, -O2, contraction on) fuses some products into the add that
// follows and ddplab builds with -ffp-contract=off, so each fused spot is written as fma / fmadd. Which ones
// was measured spot by spot against torch (make_gpt_layer_goldens.py's cases and a --big set, about 1.4e5
// values per output): none in RowwiseMoments (fusing any of its seven products moves mean or rstd); all in
// the forward's affine map and in dgamma's; in the backward the reductions' acc + p * q, b's db * mean - ds,
// c's -b * mean - (...), and dx's b * x (not a * dy * w). Every other choice moved bits.
namespace ddplab::nn {
namespace {

using vec::V;

inline V add(V a, V b) { return _mm256_add_ps(a, b); }
inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c, one rounding
inline V set1(float v) { return _mm256_set1_ps(v); }

constexpr int64_t kChunkSize = 16;  // moments_utils.h: vectors per Welford chunk

int64_t ceil_log2(int64_t x) {  // utils::CeilLog2: 1 for x <= 2
  if (x <= 2) return 1;
  int64_t bits = 0;
  for (uint64_t v = static_cast<uint64_t>(x) - 1; v != 0; v >>= 1) ++bits;
  return bits;
}

struct MomentsVec {
  int64_t m0 = 0;
  V m1 = _mm256_setzero_ps(), m2 = _mm256_setzero_ps();
};

// AddMomentsVec: merges (m0_add, m1_add, m2_add) into acc; nothing fused.
void add_moments_vec(int64_t m0_add, V m1_add, V m2_add, MomentsVec& acc) {
  const int64_t n = acc.m0 + m0_add;
  const float c = n == 0 ? 0.0f : static_cast<float>(m0_add) / static_cast<float>(n);
  const V delta = sub(m1_add, acc.m1);
  acc.m1 = add(acc.m1, mul(set1(c), delta));
  acc.m2 = add(acc.m2, add(m2_add, mul(mul(mul(delta, delta), set1(c)), set1(static_cast<float>(acc.m0)))));
  acc.m0 = n;
}

// AddMoments, the scalar twin.
void add_moments(int64_t m0_add, float m1_add, float m2_add, int64_t& m0, float& m1, float& m2) {
  const int64_t n = m0 + m0_add;
  const float c = n == 0 ? 0.0f : static_cast<float>(m0_add) / static_cast<float>(n);
  const float delta = m1_add - m1;
  m1 += c * delta;
  m2 += m2_add + delta * delta * c * static_cast<float>(m0);
  m0 = n;
}

// RowwiseMoments(X, N) with ddof 0: {mean, biased variance}.
void rowwise_moments(const float* X, int64_t N, float& mean, float& var) {
  const int64_t n = N / vec::kSize;
  const int64_t m = (n + kChunkSize - 1) / kChunkSize;
  const int64_t depth = ceil_log2(m);
  std::vector<MomentsVec> stack(static_cast<size_t>(depth));
  for (int64_t i = 0; i < m; ++i) {
    const float* X_ptr = X + i * kChunkSize * vec::kSize;
    const int64_t m0 = std::min(kChunkSize, n - i * kChunkSize);
    V m1 = _mm256_setzero_ps(), m2 = _mm256_setzero_ps();
    for (int64_t j = 0; j < m0; ++j) {
      const V x = vec::loadu(X_ptr + j * vec::kSize);
      const V delta = sub(x, m1);
      m1 = add(m1, mul(delta, set1(1.0f / static_cast<float>(j + 1))));  // c_vecs[j]
      m2 = add(m2, mul(delta, sub(x, m1)));
    }
    add_moments_vec(m0, m1, m2, stack[0]);
    int64_t mask = i + 1;
    for (int64_t j = 1; j < depth && (mask & 1) == 0; ++j) {
      add_moments_vec(stack[j - 1].m0, stack[j - 1].m1, stack[j - 1].m2, stack[j]);
      stack[j - 1] = MomentsVec();
      mask >>= 1;
    }
  }
  for (int64_t i = 1; i < depth; ++i) add_moments_vec(stack[i].m0, stack[i].m1, stack[i].m2, stack[0]);

  alignas(32) float m1_arr[vec::kSize], m2_arr[vec::kSize];
  _mm256_store_ps(m1_arr, stack[0].m1);
  _mm256_store_ps(m2_arr, stack[0].m2);
  int64_t m0 = 0;
  float m1 = 0.0f, m2 = 0.0f;
  for (int64_t i = n * vec::kSize; i < N; ++i) {
    const float delta = X[i] - m1;
    ++m0;
    m1 += delta / static_cast<float>(m0);
    m2 += delta * (X[i] - m1);
  }
  for (int64_t i = 0; i < vec::kSize; ++i) add_moments(n, m1_arr[i], m2_arr[i], m0, m1, m2);
  mean = m1;
  var = m2 / static_cast<float>(N);
}

// vec::map3 / map2 with a lambda over three / two vectors: whole vectors, then one zero-padded partial one.
template <class F>
void map3(F f, float* out, const float* a, const float* b, const float* c, int64_t size) {
  int64_t d = 0;
  for (; d < size - (size % vec::kSize); d += vec::kSize)
    vec::store(out + d, f(vec::loadu(a + d), vec::loadu(b + d), vec::loadu(c + d)));
  if (size - d > 0) {
    const int64_t r = size - d;
    vec::store(out + d, f(vec::loadu(a + d, r), vec::loadu(b + d, r), vec::loadu(c + d, r)), r);
  }
}

// vec::map2_reduce_all / map3_reduce_all with red = add and a map whose last step is a product p * q
// (factors(d, count) gives p and q of the vectors at d): the first vector's product alone, then acc + p * q
// fused for the others (the partial vector's too), then the shuffle-tree sum; below 8, lane by lane.
template <class Factors>
float sum_of_products(Factors factors, int64_t size) {
  if (size < vec::kSize) {
    const auto [p, q] = factors(0, size);
    return vec::reduce_lanes(vec::Add(), mul(p, q), size);
  }
  const auto [p0, q0] = factors(0, vec::kSize);
  V acc = mul(p0, q0);
  int64_t d = vec::kSize;
  for (; d < size - (size % vec::kSize); d += vec::kSize) {
    const auto [p, q] = factors(d, vec::kSize);
    acc = fmadd(p, q, acc);
  }
  if (size - d > 0) {
    const auto [p, q] = factors(d, size - d);
    acc = vec::set(acc, fmadd(p, q, acc), size - d);
  }
  return vec::reduce_tree(vec::Add(), acc);
}

}  // namespace

void layer_norm_forward(const float* x, const float* weight, const float* bias, float* y, float* mean, float* rstd,
                        int64_t M, int64_t C, float eps) {
  for (int64_t i = 0; i < M; ++i) {
    const float* X_ptr = x + i * C;
    float* Y_ptr = y + i * C;
    float mean_val, var_val;
    rowwise_moments(X_ptr, C, mean_val, var_val);
    const float rstd_val = 1.0f / std::sqrt(var_val + eps);
    const float scale = rstd_val;
    const float shift = -rstd_val * mean_val;
    if (weight == nullptr || bias == nullptr) {  // the scalar loop (the outer fma: w = 1 or b = 0 makes it exact)
      for (int64_t j = 0; j < C; ++j) {
        const float w = weight == nullptr ? 1.0f : weight[j];
        const float b = bias == nullptr ? 0.0f : bias[j];
        Y_ptr[j] = std::fma(std::fma(X_ptr[j], scale, shift), w, b);
      }
    } else {
      map3([&](V xv, V w, V b) { return fmadd(fmadd(xv, set1(scale), set1(shift)), w, b); }, Y_ptr, X_ptr, weight, bias,
           C);
    }
    if (mean != nullptr) mean[i] = mean_val;
    if (rstd != nullptr) rstd[i] = rstd_val;
  }
}

void layer_norm_backward(const float* dy, const float* x, const float* mean, const float* rstd, const float* weight,
                         float* dx, float* dweight, float* dbias, int64_t M, int64_t C) {
  const float scale = 1.0f / static_cast<float>(C);
  // The per-thread buffers (torch's {2, num_threads, C}, zeroed) for one thread.
  std::vector<float> dgamma_buffer(dweight != nullptr ? C : 0, 0.0f), dbeta_buffer(dbias != nullptr ? C : 0, 0.0f);
  for (int64_t i = 0; i < M; ++i) {
    const float* dY_ptr = dy + i * C;
    const float* X_ptr = x + i * C;
    if (dweight != nullptr) {
      const float a = rstd[i];
      const float b = -a * mean[i];
      map3([&](V g, V d, V xv) { return fmadd(d, fmadd(set1(a), xv, set1(b)), g); }, dgamma_buffer.data(),
           dgamma_buffer.data(), dY_ptr, X_ptr, C);
    }
    if (dbias != nullptr) {
      vec::map2([](V g, V d) { return add(g, d); }, dbeta_buffer.data(), dbeta_buffer.data(), dY_ptr, C);
    }
    if (dx == nullptr) continue;
    float* dX_ptr = dx + i * C;
    float ds, db;
    if (weight == nullptr) {  // ds = sum(dy * x), db = sum(dy)
      ds = sum_of_products(
          [&](int64_t d, int64_t r) { return std::pair(vec::loadu(dY_ptr + d, r), vec::loadu(X_ptr + d, r)); }, C);
      db = vec::reduce_all(vec::Add(), dY_ptr, C);
    } else {  // ds = sum(dy * x * w), db = sum(dy * w)
      ds = sum_of_products(
          [&](int64_t d, int64_t r) {
            return std::pair(mul(vec::loadu(dY_ptr + d, r), vec::loadu(X_ptr + d, r)), vec::loadu(weight + d, r));
          },
          C);
      db = sum_of_products(
          [&](int64_t d, int64_t r) { return std::pair(vec::loadu(dY_ptr + d, r), vec::loadu(weight + d, r)); }, C);
    }
    const float a = rstd[i];
    const float b = std::fma(db, mean[i], -ds) * a * a * a * scale;
    const float c = std::fma(-b, mean[i], -(db * a * scale));
    if (weight == nullptr) {
      vec::map2([&](V d, V xv) { return add(fmadd(set1(b), xv, mul(set1(a), d)), set1(c)); }, dX_ptr, dY_ptr, X_ptr, C);
    } else {
      map3([&](V d, V w, V xv) { return add(fmadd(set1(b), xv, mul(mul(set1(a), d), w)), set1(c)); }, dX_ptr, dY_ptr,
           weight, X_ptr, C);
    }
  }
  // The second pass: 0 + each thread's buffer row (one row here).
  for (int64_t j = 0; j < C; ++j) {
    if (dweight != nullptr) dweight[j] = 0.0f + dgamma_buffer[j];
    if (dbias != nullptr) dbias[j] = 0.0f + dbeta_buffer[j];
  }
}

}  // namespace ddplab::nn
