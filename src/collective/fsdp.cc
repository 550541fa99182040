#include "src/collective/fsdp.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "src/collective/allreduce.h"
#include "src/collective/half.h"

namespace ddplab::collective {
namespace {

int64_t row_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

}  // namespace

ShardRows fsdp_shard_rows(int64_t rows, int64_t ws, int64_t r) {
  const int64_t per = (rows + ws - 1) / ws;
  return {std::min(rows, r * per), std::min(rows, (r + 1) * per)};
}

std::pair<float, float> fsdp_divide_factors(ReduceDtype dtype, int64_t ws) {
  const float factor = static_cast<float>(ws);
  if (dtype != ReduceDtype::float16) return {1.0f, factor};
  // _get_gradient_divide_factors under overflow risk: the power of two it reaches before factor / pre <= pre.
  float pre = 1.0f;
  while (std::fmod(factor, pre) == 0.0f && factor / pre > pre) pre *= 2.0f;
  return {pre, factor / pre};
}

namespace {

float cast(float x, float) { return x; }
Half cast(float x, Half) { return to_half(x); }
BFloat16 cast(float x, BFloat16) { return to_bfloat16(x); }
float widen(float x) { return x; }
float widen(Half x) { return to_float(x); }
float widen(BFloat16 x) { return to_float(x); }

template <typename T>
std::vector<std::vector<std::vector<float>>> reduce_scatter(const std::vector<std::vector<int64_t>>& shapes,
                                                            const std::vector<std::vector<const float*>>& local,
                                                            float pre, float post) {
  const size_t ws = local.size(), np = shapes.size();
  // One rank slot: every parameter's padded chunk, in order.
  std::vector<int64_t> offset(np), per(np);
  int64_t slot = 0;
  for (size_t i = 0; i < np; ++i) {
    const int64_t rows = shapes[i].empty() ? 1 : shapes[i][0];
    per[i] = (rows + static_cast<int64_t>(ws) - 1) / static_cast<int64_t>(ws);
    offset[i] = slot;
    slot += per[i] * row_numel(shapes[i]);
  }
  const size_t n = ws * static_cast<size_t>(slot);
  std::vector<std::vector<T>> flat(ws, std::vector<T>(n, cast(0.0f, T{})));
  for (size_t r = 0; r < ws; ++r) {
    for (size_t j = 0; j < ws; ++j) {
      for (size_t i = 0; i < np; ++i) {
        const int64_t rows = shapes[i].empty() ? 1 : shapes[i][0], row = row_numel(shapes[i]);
        const ShardRows s = fsdp_shard_rows(rows, static_cast<int64_t>(ws), static_cast<int64_t>(j));
        T* to = flat[r].data() + j * static_cast<size_t>(slot) + static_cast<size_t>(offset[i]);
        const float* from = local[r][i] + s.begin * row;
        // In the reduce dtype; a division before the SUM rounds there too (a float16 tensor's div_).
        for (int64_t k = 0; k < (s.end - s.begin) * row; ++k)
          to[k] = pre != 1.0f ? cast(widen(cast(from[k], T{})) / pre, T{}) : cast(from[k], T{});
      }
    }
  }
  std::vector<T*> bufs;
  for (auto& f : flat) bufs.push_back(f.data());
  allreduce_sum(Algorithm::ring, bufs, n);  // Gloo's reduce-scatter: its ring all-reduce, each keeps its slot
  std::vector<std::vector<std::vector<float>>> out(ws, std::vector<std::vector<float>>(np));
  for (size_t r = 0; r < ws; ++r) {
    for (size_t i = 0; i < np; ++i) {
      const int64_t rows = shapes[i].empty() ? 1 : shapes[i][0], row = row_numel(shapes[i]);
      const ShardRows s = fsdp_shard_rows(rows, static_cast<int64_t>(ws), static_cast<int64_t>(r));
      const T* at = flat[r].data() + r * static_cast<size_t>(slot) + static_cast<size_t>(offset[i]);
      for (int64_t k = 0; k < (s.end - s.begin) * row; ++k)  // x / 1 is x; the quotient rounded in T
        out[r][i].push_back(widen(cast(widen(at[k]) / post, T{})));
    }
  }
  return out;
}

}  // namespace

float fsdp_round(ReduceDtype dtype, float x) {
  switch (dtype) {
    case ReduceDtype::bfloat16:
      return widen(to_bfloat16(x));
    case ReduceDtype::float16:
      return widen(to_half(x));
    default:
      return x;
  }
}

std::vector<std::vector<std::vector<float>>> fsdp_reduce_scatter(
    const std::vector<std::vector<int64_t>>& shapes, const std::vector<std::vector<const float*>>& local,
    float post_divide, ReduceDtype dtype) {
  auto [pre, post] = fsdp_divide_factors(dtype, static_cast<int64_t>(local.size()));
  if (post_divide > 0.0f) pre = 1.0f, post = post_divide;
  switch (dtype) {
    case ReduceDtype::bfloat16:
      return reduce_scatter<BFloat16>(shapes, local, pre, post);
    case ReduceDtype::float16:
      return reduce_scatter<Half>(shapes, local, pre, post);
    default:
      return reduce_scatter<float>(shapes, local, pre, post);
  }
}

}  // namespace ddplab::collective
