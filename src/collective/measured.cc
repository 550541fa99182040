#include "src/collective/measured.h"

#include <algorithm>
#include <cctype>

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

// The ranks of a chain in the order they are added, from sym_text's "((x2 + x0) + x1)"; since a + b = b + a
// bit for bit, a node whose leaf is on either side continues the chain (Gloo's ring writes x_k + partial).
// Empty when the expression is no chain (two partial sums added together).
struct ChainParser {
  const std::string& t;
  size_t at = 0;
  bool ok = true;
  // One operand: "x<rank>" or "(" expression ")"; its chain (a leaf: one rank).
  std::vector<int> operand() {
    if (at < t.size() && t[at] == 'x') {
      size_t end = at + 1;
      while (end < t.size() && std::isdigit(static_cast<unsigned char>(t[end]))) ++end;
      const int r = std::stoi(t.substr(at + 1, end - at - 1));
      at = end;
      return {r};
    }
    if (at < t.size() && t[at] == '(') {
      ++at;
      std::vector<int> c = expression();
      if (at < t.size() && t[at] == ')') ++at; else ok = false;
      return c;
    }
    ok = false;
    return {};
  }
  std::vector<int> expression() {
    std::vector<int> left = operand();
    if (t.compare(at, 3, " + ") != 0) return left;
    at += 3;
    std::vector<int> right = operand();
    if (left.size() > 1 && right.size() > 1) ok = false;  // two partial sums: no chain
    if (left.size() < right.size()) std::swap(left, right);
    left.insert(left.end(), right.begin(), right.end());
    return left;
  }
};

}  // namespace

MeasuredOrder chain_order_of(Algorithm a, size_t N, size_t n) {
  MeasuredOrder o;
  o.n = n;
  const auto syms = allreduce_symbols(a, N, n);  // its pool stays on this thread for sym_text
  for (size_t i = 0; i < n; ++i) {
    const std::string text = sym_text(syms[0][i]);
    ChainParser p{text};
    std::vector<int> order = p.expression();
    if (!p.ok || p.at != text.size() || order.size() != N) return {n, {}};  // no chain
    if (!o.runs.empty() && o.runs.back().order == order) {
      o.runs.back().end = i + 1;
    } else {
      o.runs.push_back({i, i + 1, order});
    }
  }
  return o;
}

}  // namespace ddplab::collective
