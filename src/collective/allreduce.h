// In-process all-reduce (SUM) over world_size buffers, one per simulated rank, Gloo style: one short file
// per algorithm, each stating the exact order of its additions, because that order decides
// whether two runs are bitwise equal. After the call every buffer holds the reduced result.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "src/collective/half.h"
#include "src/collective/symbolic.h"

namespace ddplab {
class ThreadPool;
}

namespace ddplab::collective {

enum class Algorithm { naive, ring, halving_doubling, tree, nccl_ring };

// "naive", "ring", "halving-doubling", "tree", "nccl-ring"
const std::vector<std::string>& algorithm_names();
Algorithm parse_algorithm(const std::string& name);  // throws std::invalid_argument
std::string algorithm_name(Algorithm a);

// Elements [lo, hi) of an n-element all-reduce. In every algorithm below an element's additions depend
// only on its index and on n (chunk and segment bounds come from n), never on its neighbours, so calls on
// disjoint spans, in any order or at once on several threads, leave exactly the bits of one whole call.
// In a call with a span, bufs[r] points at rank r's element lo (hi - lo floats): a span can live in a
// small buffer of its own.
struct Span {
  size_t lo, hi;
};

// bufs[r] points at rank r's n elements. With a pool of several threads the elements are split into spans
// (see above: the same bits for any thread count).
void allreduce_sum(Algorithm a, const std::vector<float*>& bufs, size_t n, ThreadPool* pool = nullptr);
// One span of it (bufs[r] points at element span.lo).
void allreduce_sum(Algorithm a, const std::vector<float*>& bufs, size_t n, Span span);

// The same on 16-bit values (communication hooks): the same additions in the same order, each one rounded
// to the type (Half/BFloat16's + in half.h: what Gloo's sum<float16> and NCCL's half sum compute), and the
// chunk bounds computed for 2-byte elements, as Gloo and NCCL compute them from byte counts.
void allreduce_sum(Algorithm a, const std::vector<Half*>& bufs, size_t n, ThreadPool* pool = nullptr);
void allreduce_sum(Algorithm a, const std::vector<Half*>& bufs, size_t n, Span span);
void allreduce_sum(Algorithm a, const std::vector<BFloat16*>& bufs, size_t n, ThreadPool* pool = nullptr);
void allreduce_sum(Algorithm a, const std::vector<BFloat16*>& bufs, size_t n, Span span);
// On symbols (symbolic.h): which ranks' values each element adds, in which grouping (--explain).
void allreduce_sum(Algorithm a, const std::vector<Sym*>& bufs, size_t n, Span span);
// The whole all-reduce of n elements on world_size ranks' symbols (a fresh pool on this thread: sym_leaf(r) in
// every element of rank r): [rank][element], each the sum as the algorithm groups it.
std::vector<std::vector<Sym>> allreduce_symbols(Algorithm a, size_t world_size, size_t n);

// The algorithms, for T = float, Half, BFloat16 and Sym (instantiated in their files; `a + b` is T's addition).
// naive.cc: ((x0 + x1) + x2) + ... in rank order, the notebook's hand-written average.
template <typename T>
void naive_allreduce(const std::vector<T*>& bufs, size_t n, Span span);
// ring.cc: Gloo's ring (reduce-scatter then all-gather), chunked exactly as Debian's Gloo chunks it.
template <typename T>
void ring_allreduce(const std::vector<T*>& bufs, size_t n, Span span);
// halving_doubling.cc: recursive halving reduce-scatter + recursive doubling all-gather.
template <typename T>
void halving_doubling_allreduce(const std::vector<T*>& bufs, size_t n, Span span);
// tree.cc: binary-tree reduce to rank 0, then broadcast.
template <typename T>
void tree_allreduce(const std::vector<T*>& bufs, size_t n, Span span);
// nccl_ring.cc: NCCL's ring pinned to one channel and the Simple protocol (see nccl_ring.h).
template <typename T>
void nccl_ring_allreduce(const std::vector<T*>& bufs, size_t n, Span span);

// Each algorithm file instantiates its template for these three types with this macro.
#define DDPLAB_COLLECTIVE_INSTANTIATE(fn)                            \
  template void fn<float>(const std::vector<float*>&, size_t, Span); \
  template void fn<Half>(const std::vector<Half*>&, size_t, Span);   \
  template void fn<BFloat16>(const std::vector<BFloat16*>&, size_t, Span); \
  template void fn<Sym>(const std::vector<Sym*>&, size_t, Span);

}  // namespace ddplab::collective
