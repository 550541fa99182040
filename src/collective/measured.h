// An all-reduce order measured on a real communicator (the recorder's probes, docs/trace_format.md
// "allreduce_order"), replayed: each run of elements is summed as a chain, the ranks' values entering a
// left-to-right sum in the measured order,
//   result[i] = ((x_p0 + x_p1) + x_p2) + ... + x_p(N-1)
// which is what every ring computes (Gloo's, NCCL's on any number of channels and any chunking: the runs say
// where each chunk starts). A tree or halving-doubling is no chain: the probes say so and nothing is replayed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "src/collective/allreduce.h"

namespace ddplab::collective {

struct ChainRun {
  size_t begin, end;       // elements [begin, end)
  std::vector<int> order;  // the ranks in the order their values are added (a permutation of 0..N-1)
};

struct MeasuredOrder {
  size_t n = 0;                // the all-reduce's element count
  std::vector<ChainRun> runs;  // cover [0, n) in order
};

// "" when `o` is well formed for world_size ranks (runs in order, covering [0, n), each order a
// permutation), else what is wrong.
std::string check_measured(const MeasuredOrder& o, size_t world_size);

// bufs[r] points at rank r's element span.lo (as allreduce_sum's spans); every rank ends with the chain sum.
template <typename T>
void chain_allreduce(const MeasuredOrder& o, const std::vector<T*>& bufs, Span span);
void chain_allreduce(const MeasuredOrder& o, const std::vector<float*>& bufs, ThreadPool* pool = nullptr);

// The chain orders an algorithm adds in, read off its symbolic run (allreduce_symbols): for a test's hidden
// order, or to compare a measured order with a known one. Empty runs when some element is no chain.
MeasuredOrder chain_order_of(Algorithm a, size_t world_size, size_t n);

}  // namespace ddplab::collective
