// --explain: Gloo's ring all-reduce on one small gradient, message by message, and where its result
// stops being bitwise equal to the rank-order sum.
#pragma once

#include "src/compare.h"

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

// Distance in units in the last place between two finite floats (0 when bitwise equal).

}  // namespace ddplab
