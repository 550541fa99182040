// Recursive halving / doubling all-reduce (Thakur, Rabenseifner and Gropp, 2005; MPICH's allreduce).
//
// Let P be the largest power of two <= N. Ranks r >= P first fold into rank r - P: x_{r-P} + x_r.
// Reduce-scatter among ranks 0..P-1: for distance d = P/2, P/4, ..., 1, rank r pairs with r XOR d; both
// split their current range in two, the rank without bit d keeps the lower half, and each adds the
// partner's half to its own (own + partner's). All-gather runs the same pairs in reverse (d = 1 .. P/2),
// copying. Folded ranks finally receive a copy from r - P. For N = 4 every element is
// (x0 + x2) + (x1 + x3) or a rotation of it; for N = 2 it is x0 + x1.
#include <algorithm>

#include "src/collective/allreduce.h"

namespace ddplab::collective {

template <typename T>
void halving_doubling_allreduce(const std::vector<T*>& bufs, size_t n, Span span) {
  const size_t N = bufs.size();
  size_t P = 1;
  while (P * 2 <= N) P *= 2;
  const size_t a = span.lo, z = span.hi;
  for (size_t r = P; r < N; ++r) {
    for (size_t i = 0; i < z - a; ++i) bufs[r - P][i] = bufs[r - P][i] + bufs[r][i];
  }
  // Each rank's current range [lo, hi) of the whole buffer (it depends on n only); the work below is
  // its intersection with the span. bufs[r][k] and snapshot[r][k] hold element a + k.
  std::vector<size_t> lo(P, 0), hi(P, n);
  std::vector<std::vector<T>> snapshot(P);
  const auto in_span = [&](size_t v) { return std::min(std::max(v, a), z); };
  std::vector<size_t> dists;
  for (size_t d = P / 2; d >= 1; d /= 2) dists.push_back(d);
  for (size_t d : dists) {  // reduce-scatter
    for (size_t r = 0; r < P; ++r) snapshot[r].assign(bufs[r], bufs[r] + (z - a));
    for (size_t r = 0; r < P; ++r) {
      const size_t partner = r ^ d, mid = lo[r] + (hi[r] - lo[r]) / 2;
      if ((r & d) == 0)
        hi[r] = mid;
      else
        lo[r] = mid;
      for (size_t i = in_span(lo[r]); i < in_span(hi[r]); ++i) {
        bufs[r][i - a] = snapshot[r][i - a] + snapshot[partner][i - a];
      }
    }
  }
  for (auto it = dists.rbegin(); it != dists.rend(); ++it) {  // all-gather: undo the halvings
    const size_t d = *it;
    for (size_t r = 0; r < P; ++r) snapshot[r].assign(bufs[r], bufs[r] + (z - a));
    std::vector<size_t> new_lo(lo), new_hi(hi);
    for (size_t r = 0; r < P; ++r) {
      const size_t partner = r ^ d, b = in_span(lo[partner]), e = in_span(hi[partner]);
      std::copy(snapshot[partner].begin() + static_cast<std::ptrdiff_t>(b - a),
                snapshot[partner].begin() + static_cast<std::ptrdiff_t>(e - a), bufs[r] + (b - a));
      new_lo[r] = std::min(lo[r], lo[partner]);
      new_hi[r] = std::max(hi[r], hi[partner]);
    }
    lo = new_lo;
    hi = new_hi;
  }
  for (size_t r = P; r < N; ++r) std::copy(bufs[r - P], bufs[r - P] + (z - a), bufs[r]);
}
DDPLAB_COLLECTIVE_INSTANTIATE(halving_doubling_allreduce)

}  // namespace ddplab::collective
