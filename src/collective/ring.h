// Gloo's ring all-reduce, step by step (gloo/allreduce.cc, as Debian's libgloo 2022 builds it).
//
// Chunking: the buffer of B bytes is cut into numSeg segments,
//   numSeg = roundUp(max(ceil(B / 1 MiB), 2 * N), N),   segBytes = roundUp(ceil(B / numSeg), elementSize),
// elementSize 4 for float, 2 for float16 (so a float16 buffer is not cut where the same bytes of floats are),
// and rank k owns chunk k = segments [k * numSeg/N, (k+1) * numSeg/N); trailing chunks may be short or empty.
//
// Reduce-scatter, N-1 steps: at step s rank r sends its partial sum of chunk (r+1+s) mod N to rank r-1,
// which adds it to its own data. Chunk k therefore starts at rank k-1 and ends, complete, at rank k:
//   result[i in chunk k] = x_k + (x_{k+1} + (... + (x_{k-2} + x_{k-1})))      (indices mod N)
// All-gather, N-1 steps: at step s rank r sends chunk (r+s) mod N to rank r-1, which copies it.
//
// So for N >= 3 different chunks are summed in different orders: the result is not the rank-order sum,
// and which elements differ from it depends on the chunk boundaries, i.e. on the bucket's size.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "src/collective/allreduce.h"

namespace ddplab::collective {

struct RingLayout {
  size_t num_segments = 0, segment_elems = 0, segments_per_rank = 0;
  std::vector<size_t> chunk_begin, chunk_end;  // element ranges, one per rank
};

RingLayout gloo_ring_layout(size_t n_elems, size_t world_size, size_t elem_size = sizeof(float));

// One message of the ring: `from` sends chunk `chunk` to `to`; in the reduce-scatter phase `to` adds it.
struct RingMessage {
  bool reduce_scatter;
  size_t step, from, to, chunk;
};

// The ring, with an optional observer called after every message is applied (for --explain); T = float,
// Half or BFloat16 (chunked with elementSize sizeof(T)).
template <typename T>
void ring_allreduce_observed(const std::vector<T*>& bufs, size_t n, Span span,
                             const std::function<void(const RingMessage&)>& observe);

}  // namespace ddplab::collective
