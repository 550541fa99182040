// --explain: the all-reduce of one small gradient in the order the run uses (--allreduce: Gloo's ring,
// NCCL's pinned ring, the tree, halving-doubling, the rank-order sum): who adds what in which order (the
// algorithm's own code run on symbols), where its result stops being bitwise equal to the rank-order sum,
// and every other order on the same values.
#pragma once

#include "src/collective/allreduce.h"
#include "src/base/compare.h"

#include <string>
#include <vector>

namespace ddplab {

// Gloo's ring run on a few floats and recorded: the chunks, every message, the result vs rank order.
struct RingStep {
  bool reduce_scatter = true;
  size_t step = 0, from = 0, to = 0, chunk = 0, begin = 0, end = 0;
  std::vector<float> held;  // what `to` holds in [begin, end) after the message
};
struct RingTrace {
  std::vector<std::vector<float>> inputs;  // [rank][element]
  size_t num_segments = 0, segment_elems = 0, segments_per_rank = 0;
  std::vector<size_t> chunk_begin, chunk_end;  // rank k owns [chunk_begin[k], chunk_end[k])
  std::vector<RingStep> steps;                 // messages of non-empty chunks, in order
  std::vector<float> ring, rank_order;         // rank 0's ring result; ((x0 + x1) + x2) ...
  std::vector<int64_t> ulps;                   // ulp_distance(ring[i], rank_order[i])
};
// inputs[r] = rank r's values (already multiplied by 1/world_size if predivide).
RingTrace trace_ring(const std::vector<std::vector<float>>& inputs);

// The trace as text for the terminal; `name` labels the inputs.
std::string explain_ring(const std::string& name, const std::vector<std::vector<float>>& inputs);

// The grouping of each element's sum under algorithm a for n elements over world_size ranks (its own code
// run on symbols, src/collective/symbolic.h), as ranges of consecutive elements that share one grouping.
struct OrderRange {
  size_t begin = 0, end = 0;
  std::string sum;  // "(x1 + x2) + x0"
};
std::vector<OrderRange> addition_order(collective::Algorithm a, size_t n, size_t world_size);

// --explain for any order: its description, (Gloo's ring: every message), the grouping per element range,
// the result against the rank-order sum, and every order of the simulator on the first element where they
// do not all agree. inputs[r] = rank r's values.
std::string explain_allreduce(collective::Algorithm a, const std::string& name,
                              const std::vector<std::vector<float>>& inputs);

}  // namespace ddplab
