#include "src/collective/allreduce.h"

#include <algorithm>
#include <stdexcept>

#include "src/base/parallel.h"

namespace ddplab::collective {

const std::vector<std::string>& algorithm_names() {
  static const std::vector<std::string> names = {"naive", "ring", "halving-doubling", "tree", "nccl-ring"};
  return names;
}

Algorithm parse_algorithm(const std::string& name) {
  const auto& names = algorithm_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<Algorithm>(i);
  }
  throw std::invalid_argument("unknown all-reduce algorithm '" + name + "'");
}

std::string algorithm_name(Algorithm a) { return algorithm_names()[static_cast<size_t>(a)]; }

namespace {

template <typename T>
void sum_span(Algorithm a, const std::vector<T*>& bufs, size_t n, Span span) {
  switch (a) {
    case Algorithm::naive:
      return naive_allreduce(bufs, n, span);
    case Algorithm::ring:
      return ring_allreduce(bufs, n, span);
    case Algorithm::halving_doubling:
      return halving_doubling_allreduce(bufs, n, span);
    case Algorithm::tree:
      return tree_allreduce(bufs, n, span);
    case Algorithm::nccl_ring:
      return nccl_ring_allreduce(bufs, n, span);
  }
}

template <typename T>
void sum_pooled(Algorithm a, const std::vector<T*>& bufs, size_t n, ThreadPool* pool) {
  const size_t parts = pool ? static_cast<size_t>(pool->size()) : 1;
  const size_t step = (n + parts - 1) / parts / 16 * 16 + 16;  // whole cache lines per span (of floats)
  parallel_for(pool, parts, static_cast<double>(n * bufs.size()) / static_cast<double>(parts), [&](size_t t) {
    const size_t lo = std::min(n, t * step), hi = std::min(n, (t + 1) * step);
    if (lo >= hi) return;
    std::vector<T*> at(bufs);
    for (T*& p : at) p += lo;
    sum_span(a, at, n, Span{lo, hi});
  });
}

}  // namespace

void allreduce_sum(Algorithm a, const std::vector<float*>& bufs, size_t n, Span span) { sum_span(a, bufs, n, span); }
void allreduce_sum(Algorithm a, const std::vector<Half*>& bufs, size_t n, Span span) { sum_span(a, bufs, n, span); }
void allreduce_sum(Algorithm a, const std::vector<BFloat16*>& bufs, size_t n, Span span) { sum_span(a, bufs, n, span); }
void allreduce_sum(Algorithm a, const std::vector<Sym*>& bufs, size_t n, Span span) { sum_span(a, bufs, n, span); }

std::vector<std::vector<Sym>> allreduce_symbols(Algorithm a, size_t world_size, size_t n) {
  sym_reset(static_cast<int>(world_size));
  std::vector<std::vector<Sym>> bufs;
  std::vector<Sym*> ptrs;
  for (size_t r = 0; r < world_size; ++r) bufs.emplace_back(n, sym_leaf(static_cast<int>(r)));
  for (auto& b : bufs) ptrs.push_back(b.data());
  allreduce_sum(a, ptrs, n, Span{0, n});
  return bufs;
}
void allreduce_sum(Algorithm a, const std::vector<float*>& bufs, size_t n, ThreadPool* pool) {
  sum_pooled(a, bufs, n, pool);
}
void allreduce_sum(Algorithm a, const std::vector<Half*>& bufs, size_t n, ThreadPool* pool) {
  sum_pooled(a, bufs, n, pool);
}
void allreduce_sum(Algorithm a, const std::vector<BFloat16*>& bufs, size_t n, ThreadPool* pool) {
  sum_pooled(a, bufs, n, pool);
}

}  // namespace ddplab::collective
