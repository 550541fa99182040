// In-process all-reduce (SUM) over world_size buffers, one per simulated rank, Gloo style: one short file
// per algorithm, each stating the exact order of its float additions, because that order decides
// whether two runs are bitwise equal. After the call every buffer holds the reduced result.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ddplab::collective {

enum class Algorithm { naive, ring, halving_doubling, tree, nccl_ring };

// "naive", "ring", "halving-doubling", "tree", "nccl-ring"
const std::vector<std::string>& algorithm_names();
Algorithm parse_algorithm(const std::string& name);  // throws std::invalid_argument
std::string algorithm_name(Algorithm a);

// bufs[r] points at rank r's n floats.
void allreduce_sum(Algorithm a, const std::vector<float*>& bufs, size_t n);

// naive.cc: ((x0 + x1) + x2) + ... in rank order, the notebook's hand-written average.
void naive_allreduce(const std::vector<float*>& bufs, size_t n);
// ring.cc: Gloo's ring (reduce-scatter then all-gather), chunked exactly as Debian's Gloo chunks it.
void ring_allreduce(const std::vector<float*>& bufs, size_t n);
// halving_doubling.cc: recursive halving reduce-scatter + recursive doubling all-gather.
void halving_doubling_allreduce(const std::vector<float*>& bufs, size_t n);
// tree.cc: binary-tree reduce to rank 0, then broadcast.
void tree_allreduce(const std::vector<float*>& bufs, size_t n);
// nccl_ring.cc: NCCL's ring pinned to one channel and the Simple protocol (see nccl_ring.h).
void nccl_ring_allreduce(const std::vector<float*>& bufs, size_t n);

}  // namespace ddplab::collective
