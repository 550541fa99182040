#include "src/tensor/torch_sum.h"

#include <algorithm>
#include <vector>

#include "src/tensor/cpu_capability.h"

namespace ddplab {
namespace {

int64_t ceil_log2(int64_t x) {  // at::native::utils::CeilLog2
  if (x <= 2) return 1;
  int64_t bits = 0;
  for (uint64_t v = static_cast<uint64_t>(x - 1); v; v >>= 1) ++bits;
  return bits;
}

// multi_row_sum over `n` rows of `lanes` independent accumulators; load(i, k) is row i, lane k.
// Vector accumulators are modelled lane by lane: a vector add is one float add per lane.
template <typename Load>
std::vector<float> multi_row_sum(int64_t n, int64_t lanes, Load load) {
  constexpr int64_t kLevels = 4;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2(n) / kLevels);
  const int64_t level_step = int64_t{1} << level_power, level_mask = level_step - 1;
  std::vector<std::vector<float>> acc(kLevels, std::vector<float>(static_cast<size_t>(lanes), 0.0f));
  int64_t i = 0;
  while (i + level_step <= n) {
    for (int64_t j = 0; j < level_step; ++j, ++i) {
      for (int64_t k = 0; k < lanes; ++k) acc[0][k] = acc[0][k] + load(i, k);
    }
    for (int64_t j = 1; j < kLevels; ++j) {
      for (int64_t k = 0; k < lanes; ++k) {
        acc[j][k] = acc[j][k] + acc[j - 1][k];
        acc[j - 1][k] = 0.0f;
      }
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < n; ++i) {
    for (int64_t k = 0; k < lanes; ++k) acc[0][k] = acc[0][k] + load(i, k);
  }
  for (int64_t j = 1; j < kLevels; ++j) {
    for (int64_t k = 0; k < lanes; ++k) acc[0][k] = acc[0][k] + acc[j][k];
  }
  return acc[0];
}

// row_sum: the n rows seen as (n/4, 4): four interleaved partial sums, the leftover rows into the first,
// then the four added left to right. `lanes` values per row.
template <typename Load>
std::vector<float> row_sum(int64_t n, int64_t lanes, Load load) {
  constexpr int64_t kIlp = 4;
  const int64_t groups = n / kIlp;
  // lane (p, k) of the grouped view = row g*4 + p, lane k
  std::vector<float> partial = multi_row_sum(
      groups, kIlp * lanes, [&](int64_t g, int64_t pk) { return load(g * kIlp + pk / lanes, pk % lanes); });
  for (int64_t i = groups * kIlp; i < n; ++i) {
    for (int64_t k = 0; k < lanes; ++k) partial[k] = partial[k] + load(i, k);
  }
  std::vector<float> out(partial.begin(), partial.begin() + lanes);
  for (int64_t p = 1; p < kIlp; ++p) {
    for (int64_t k = 0; k < lanes; ++k) out[k] = out[k] + partial[p * lanes + k];
  }
  return out;
}

// Vectorized<float>::size() of the kernels torch runs here, unless the caller names one.
int64_t lanes_or_torchs(int64_t lanes) { return lanes > 0 ? lanes : float_lanes(torch_cpu_capability()); }

}  // namespace

float torch_sum_contiguous(const float* in, int64_t n, int64_t lanes) {
  const int64_t kVec = lanes_or_torchs(lanes);
  if (n < kVec) return row_sum(n, 1, [&](int64_t r, int64_t) { return in[r]; })[0];
  // vectorized_inner_sum: L-lane vectors by row_sum, the scalar tail, then the lanes left to right.
  const int64_t vecs = n / kVec;
  const auto vacc = row_sum(vecs, kVec, [&](int64_t v, int64_t lane) { return in[v * kVec + lane]; });
  float acc = 0.0f;
  for (int64_t k = vecs * kVec; k < n; ++k) acc = acc + in[k];
  for (int64_t lane = 0; lane < kVec; ++lane) acc = acc + vacc[lane];
  return acc;
}

void torch_sum_dim0(const float* in, float* out, int64_t rows, int64_t cols, int64_t lanes) {
  const int64_t kVec = lanes_or_torchs(lanes);
  const auto at = [&](int64_t r, int64_t c) { return in[r * cols + c]; };
  // The output starts at 0 and each result is added to it (CastStoreAccumulate): 0 + -0 gives +0.
  const auto store = [&](int64_t c, float v) { out[c] = 0.0f + v; };
  if (cols == 1) {
    store(0, torch_sum_contiguous(in, rows, kVec));
    return;
  }
  int64_t j = 0;
  if (cols >= kVec) {  // vectorized_outer_sum
    for (; j + 4 * kVec <= cols; j += 4 * kVec) {
      const auto s = multi_row_sum(rows, 4 * kVec, [&](int64_t r, int64_t k) { return at(r, j + k); });
      for (int64_t k = 0; k < 4 * kVec; ++k) store(j + k, s[k]);
    }
    for (; j + kVec <= cols; j += kVec) {
      const auto s = row_sum(rows, kVec, [&](int64_t r, int64_t k) { return at(r, j + k); });
      for (int64_t k = 0; k < kVec; ++k) store(j + k, s[k]);
    }
  } else {  // scalar_outer_sum
    for (; j + 3 < cols; j += 4) {
      const auto s = multi_row_sum(rows, 4, [&](int64_t r, int64_t k) { return at(r, j + k); });
      for (int64_t k = 0; k < 4; ++k) store(j + k, s[k]);
    }
  }
  for (; j < cols; ++j) store(j, row_sum(rows, 1, [&](int64_t r, int64_t) { return at(r, j); })[0]);
}

}  // namespace ddplab
