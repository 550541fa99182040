// FSDP2's reduce-scatter of one parameter group (torch 2.x `fully_shard`), as it runs over Gloo: the first piece
// of issue 42's replay. Measured on torch 2.11 and 2.15, CPU/Gloo (tests/fsdp_reduce_test.cc):
//   - each parameter is sharded on dim 0 in chunks of ceil(rows / world_size) rows (the last ones short or
//     empty); the group's flat buffer holds, rank slot by rank slot, every parameter's chunk zero-padded to that
//     many rows, in the group's parameter order;
//   - Gloo has no reduce-scatter: ProcessGroupGloo runs its ring all-reduce over the whole flat buffer (chunked
//     as Gloo chunks that many bytes) and each rank keeps its slot;
//   - a float32 reduce is ReduceOp.AVG: the ring sum, then a true division by world_size (s / 3 at 3 ranks, not
//     s * (1/3) as DDP's pre-division).
#pragma once

#include <cstdint>
#include <vector>

namespace ddplab::collective {

// shapes[i]: parameter i's full shape (dim 0 sharded); local[r][i]: rank r's unsharded local gradient of it
// (row-major). Returns [r][i]: rank r's shard of the reduced gradient, its own rows only (possibly none), each
// sum divided by `post_divide` (0: world_size, ReduceOp.AVG's; 1: a plain SUM).
std::vector<std::vector<std::vector<float>>> fsdp_reduce_scatter(
    const std::vector<std::vector<int64_t>>& shapes, const std::vector<std::vector<const float*>>& local,
    float post_divide = 0.0f);

// Rows [begin, end) of dim 0 that rank r holds of a parameter with `rows` rows at world_size ws.
struct ShardRows {
  int64_t begin, end;
};
ShardRows fsdp_shard_rows(int64_t rows, int64_t ws, int64_t r);

}  // namespace ddplab::collective
