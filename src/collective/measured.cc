#include "src/collective/measured.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/base/parallel.h"

namespace ddplab::collective {

std::string check_measured(const MeasuredOrder& o, size_t N) {
  size_t at = 0;
  for (const ChainRun& r : o.runs) {
    if (r.begin != at || r.end <= r.begin || r.end > o.n)
      return fmt::format("run [{}, {}) does not follow element {} within {}", r.begin, r.end, at, o.n);
    std::vector<bool> seen(N, false);
    if (r.order.size() != N) return fmt::format("run [{}, {}) orders {} ranks, not {}", r.begin, r.end, r.order.size(), N);
    for (int p : r.order) {
      if (p < 0 || static_cast<size_t>(p) >= N || seen[static_cast<size_t>(p)])
        return fmt::format("run [{}, {}) is no permutation of the {} ranks", r.begin, r.end, N);
      seen[static_cast<size_t>(p)] = true;
    }
    at = r.end;
  }
  if (at != o.n) return fmt::format("the runs end at element {}, not {}", at, o.n);
  return "";
}

template <typename T>
void chain_allreduce(const MeasuredOrder& o, const std::vector<T*>& bufs, Span span) {
  const size_t N = bufs.size();
  if (N == 1) return;
  // The first run that ends past span.lo: runs are in order.
  auto it = std::upper_bound(o.runs.begin(), o.runs.end(), span.lo,
                             [](size_t lo, const ChainRun& r) { return lo < r.end; });
  std::vector<T> acc;
  for (; it != o.runs.end() && it->begin < span.hi; ++it) {
    const size_t b = std::max(it->begin, span.lo), e = std::min(it->end, span.hi), len = e - b, at = b - span.lo;
    acc.assign(bufs[static_cast<size_t>(it->order[0])] + at, bufs[static_cast<size_t>(it->order[0])] + at + len);
    for (size_t s = 1; s < N; ++s) {
      const T* x = bufs[static_cast<size_t>(it->order[s])] + at;
      for (size_t i = 0; i < len; ++i) acc[i] = acc[i] + x[i];
    }
    for (size_t r = 0; r < N; ++r) std::copy(acc.begin(), acc.end(), bufs[r] + at);
  }
}
template void chain_allreduce<float>(const MeasuredOrder&, const std::vector<float*>&, Span);
template void chain_allreduce<Sym>(const MeasuredOrder&, const std::vector<Sym*>&, Span);

void chain_allreduce(const MeasuredOrder& o, const std::vector<float*>& bufs, ThreadPool* pool) {
  // Spans of whole runs' pieces: each element's additions depend on its run alone.
  constexpr size_t kBlock = size_t{1} << 16;
  const size_t blocks = (o.n + kBlock - 1) / kBlock;
  parallel_for(pool, blocks, static_cast<double>(bufs.size() * kBlock), [&](size_t k) {
    const Span span{k * kBlock, std::min(o.n, (k + 1) * kBlock)};
    std::vector<float*> at;
    for (float* b : bufs) at.push_back(b + span.lo);
    chain_allreduce(o, at, span);
  });
}

namespace {

// The ranks of a chain in the order they are added; since a + b = b + a bit for bit, a node whose leaf is on
// either side continues the chain (Gloo's ring writes x_k + partial). False when two partial sums are added.
bool chain_of(Sym s, std::vector<int>* order) {
  int rank = 0;
  Sym left, right;
  if (sym_parts(s, &rank, &left, &right)) {
    order->push_back(rank);
    return true;
  }
  std::vector<int> l, r;
  if (!chain_of(left, &l) || !chain_of(right, &r) || (l.size() > 1 && r.size() > 1)) return false;
  if (l.size() < r.size()) std::swap(l, r);
  order->insert(order->end(), l.begin(), l.end());
  order->insert(order->end(), r.begin(), r.end());
  return true;
}

}  // namespace

MeasuredOrder chain_order_of(Algorithm a, size_t N, size_t n) {
  MeasuredOrder o;
  o.n = n;
  const auto syms = allreduce_symbols(a, N, n);  // its pool stays on this thread for sym_parts
  for (size_t i = 0; i < n; ++i) {
    std::vector<int> order;
    if (!chain_of(syms[0][i], &order) || order.size() != N) return {n, {}};  // no chain
    if (!o.runs.empty() && o.runs.back().order == order) {
      o.runs.back().end = i + 1;
    } else {
      o.runs.push_back({i, i + 1, order});
    }
  }
  return o;
}

}  // namespace ddplab::collective
