#include "src/collective/fsdp.h"

#include <algorithm>
#include <cstring>

#include "src/collective/allreduce.h"

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

std::vector<std::vector<std::vector<float>>> fsdp_reduce_scatter(
    const std::vector<std::vector<int64_t>>& shapes, const std::vector<std::vector<const float*>>& local,
    float post_divide) {
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
  std::vector<std::vector<float>> flat(ws, std::vector<float>(n, 0.0f));
  for (size_t r = 0; r < ws; ++r) {
    for (size_t j = 0; j < ws; ++j) {
      for (size_t i = 0; i < np; ++i) {
        const int64_t rows = shapes[i].empty() ? 1 : shapes[i][0], row = row_numel(shapes[i]);
        const ShardRows s = fsdp_shard_rows(rows, static_cast<int64_t>(ws), static_cast<int64_t>(j));
        std::memcpy(flat[r].data() + j * static_cast<size_t>(slot) + static_cast<size_t>(offset[i]),
                    local[r][i] + s.begin * row, static_cast<size_t>((s.end - s.begin) * row) * sizeof(float));
      }
    }
  }
  std::vector<float*> bufs;
  for (auto& f : flat) bufs.push_back(f.data());
  allreduce_sum(Algorithm::ring, bufs, n);  // Gloo's reduce-scatter: its ring all-reduce, each keeps its slot
  const float div = post_divide > 0.0f ? post_divide : static_cast<float>(ws);
  std::vector<std::vector<std::vector<float>>> out(ws, std::vector<std::vector<float>>(np));
  for (size_t r = 0; r < ws; ++r) {
    for (size_t i = 0; i < np; ++i) {
      const int64_t rows = shapes[i].empty() ? 1 : shapes[i][0], row = row_numel(shapes[i]);
      const ShardRows s = fsdp_shard_rows(rows, static_cast<int64_t>(ws), static_cast<int64_t>(r));
      const float* at = flat[r].data() + r * static_cast<size_t>(slot) + static_cast<size_t>(offset[i]);
      for (int64_t k = 0; k < (s.end - s.begin) * row; ++k) out[r][i].push_back(at[k] / div);  // x / 1 is x
    }
  }
  return out;
}

}  // namespace ddplab::collective
