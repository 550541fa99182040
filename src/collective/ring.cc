#include "src/collective/ring.h"

#include <algorithm>

#include "src/collective/allreduce.h"

namespace ddplab::collective {
namespace {

size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }
size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

}  // namespace

RingLayout gloo_ring_layout(size_t n_elems, size_t world_size, size_t elem_size) {
  constexpr size_t kMaxSegmentBytes = 1 << 20;
  const size_t bytes = n_elems * elem_size;
  RingLayout L;
  L.num_segments = round_up(std::max(ceil_div(bytes, kMaxSegmentBytes), 2 * world_size), world_size);
  const size_t segment_bytes = round_up(ceil_div(bytes, L.num_segments), elem_size);
  L.segment_elems = segment_bytes / elem_size;
  L.segments_per_rank = L.num_segments / world_size;
  for (size_t k = 0; k < world_size; ++k) {
    const size_t chunk_elems = L.segments_per_rank * L.segment_elems;
    L.chunk_begin.push_back(std::min(n_elems, k * chunk_elems));
    L.chunk_end.push_back(std::min(n_elems, (k + 1) * chunk_elems));
  }
  return L;
}

template <typename T>
void ring_allreduce_observed(const std::vector<T*>& bufs, size_t n, Span span,
                             const std::function<void(const RingMessage&)>& observe) {
  const size_t N = bufs.size();
  if (N == 1) return;
  const RingLayout L = gloo_ring_layout(n, N, sizeof(T));
  for (size_t phase = 0; phase < 2; ++phase) {
    const bool reduce_scatter = phase == 0;
    for (size_t s = 0; s + 1 < N; ++s) {
      // In step s rank r sends chunk c = (r+1+s) (reduce-scatter) or (r+s) (all-gather) to rank r-1, which
      // is itself sending chunk c-1 at that moment: no rank writes a chunk that is being sent, so the
      // messages can be applied in place, one after another.
      for (size_t r = 0; r < N; ++r) {
        const size_t chunk = reduce_scatter ? (r + 1 + s) % N : (r + s) % N;
        const size_t to = (r + N - 1) % N;
        const size_t b = std::max(L.chunk_begin[chunk], span.lo), e = std::min(L.chunk_end[chunk], span.hi);
        const T* src = bufs[r] + (b - span.lo);  // element b (bufs[r] is element span.lo)
        T* dst = bufs[to] + (b - span.lo);
        if (b >= e) {
          // outside this span
        } else if (reduce_scatter) {
          for (size_t i = 0; i < e - b; ++i) dst[i] = dst[i] + src[i];  // own + received
        } else {
          std::copy(src, src + (e - b), dst);
        }
        if (observe) observe({reduce_scatter, s, r, to, chunk});
      }
    }
  }
}

template <typename T>
void ring_allreduce(const std::vector<T*>& bufs, size_t n, Span span) {
  ring_allreduce_observed(bufs, n, span, nullptr);
}
DDPLAB_COLLECTIVE_INSTANTIATE(ring_allreduce)
template void ring_allreduce_observed<float>(const std::vector<float*>&, size_t, Span,
                                             const std::function<void(const RingMessage&)>&);
template void ring_allreduce_observed<Half>(const std::vector<Half*>&, size_t, Span,
                                            const std::function<void(const RingMessage&)>&);
template void ring_allreduce_observed<BFloat16>(const std::vector<BFloat16*>&, size_t, Span,
                                                const std::function<void(const RingMessage&)>&);

}  // namespace ddplab::collective
