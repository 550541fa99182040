// NCCL's ring all-reduce (src/device/all_reduce.h runRing, NCCL 2.28), as it runs when pinned to one
// ring, one channel and the Simple protocol (nccl_exact_environment()).
//
// Partition: the buffer is walked in loops of nranks * C elements (C = the chunk, nccl_ring_chunk_elems);
// the last loop, when shorter, uses C' = roundUp(ceil(rem / nranks), 16 / sizeof(T)) (16 bytes: 4 floats,
// 8 halves). Inside a loop, chunk c is elements [c * C, (c + 1) * C) of it. C is a byte count divided by
// sizeof(T), so a buffer of halves is cut at twice the element counts of one of floats.
//
// Order: the ring sends to the next position (p -> p + 1). In the reduce-scatter, the rank at position
// c + 1 sends chunk c first, each next position adds its own value to what it received, and position c
// adds last and holds the result:
//   result[i in chunk c] = ((x_{c+1} + x_{c+2}) + ... + x_{c-1}) + x_c              (positions mod N)
// then the all-gather copies it around the ring. Compare Gloo's ring (ring.h), which runs the other way.
// Here the ring's positions are the ranks in rank order, which is how NCCL builds a ring when every rank
// is its own node (--share-gpus) and in rank order on one node when GPUs are numbered along the fabric.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace ddplab::collective {

// The environment that pins NCCL to the order above; set in every rank before its first NCCL call.
std::vector<std::pair<std::string, std::string>> nccl_exact_environment();

// C in the pinned configuration, in elements of elem_size bytes (2 MiB of them).
size_t nccl_ring_chunk_elems(size_t elem_size = sizeof(float));

// One chunk of one loop: elements [begin, end) whose sum starts at ring position `first` and ends, complete,
// at position `owner` (= first - 1 mod N).
struct NcclChunk {
  size_t begin, end, first, owner;
};
std::vector<NcclChunk> nccl_ring_chunks(size_t n_elems, size_t world_size, size_t chunk_elems = nccl_ring_chunk_elems(),
                                        size_t elem_size = sizeof(float));

}  // namespace ddplab::collective
