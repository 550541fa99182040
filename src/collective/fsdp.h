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
#include <utility>
#include <vector>

namespace ddplab::collective {

//   - a bfloat16 reduce (MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)) is the same in bfloat16: each add and
//     the division rounded to bfloat16; a float16 one is ReduceOp.SUM between two divisions in float16, by the
//     power of two torch's _get_gradient_divide_factors picks before and the rest of world_size after (3 ranks:
//     / 2, then / 1.5), against overflow.
enum class ReduceDtype { float32, bfloat16, float16 };

// shapes[i]: parameter i's full shape (dim 0 sharded); local[r][i]: rank r's unsharded local gradient of it
// (row-major; for a 16-bit reduce, values that dtype holds, as autograd gives them). Returns [r][i]: rank r's
// shard of the reduced gradient, its own rows only (possibly none), in float32. post_divide 0: world_size's
// divisions as above; otherwise the sum divided by post_divide alone (1: a plain SUM).
std::vector<std::vector<std::vector<float>>> fsdp_reduce_scatter(
    const std::vector<std::vector<int64_t>>& shapes, const std::vector<std::vector<const float*>>& local,
    float post_divide = 0.0f, ReduceDtype dtype = ReduceDtype::float32);

// x rounded to `dtype` and back to float (float32: x itself).
float fsdp_round(ReduceDtype dtype, float x);

// The divisions torch makes around a SUM for `dtype` at `ws` ranks: {before, after} (1: none).
std::pair<float, float> fsdp_divide_factors(ReduceDtype dtype, int64_t ws);

// Rows [begin, end) of dim 0 that rank r holds of a parameter with `rows` rows at world_size ws.
struct ShardRows {
  int64_t begin, end;
};
ShardRows fsdp_shard_rows(int64_t rows, int64_t ws, int64_t r);

}  // namespace ddplab::collective
