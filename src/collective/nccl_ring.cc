// NCCL's ring all-reduce, chunk by chunk; the order and partition are stated in nccl_ring.h.
#include "src/collective/nccl_ring.h"

#include <algorithm>

#include "src/collective/allreduce.h"

namespace ddplab::collective {

std::vector<std::pair<std::string, std::string>> nccl_exact_environment() {
  return {{"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", "Simple"}, {"NCCL_MIN_NCHANNELS", "1"}, {"NCCL_MAX_NCHANNELS", "1"}};
}

// NCCL_BUFFSIZE 4 MiB / NCCL_STEPS 8 = 512 KiB per step, times ALLREDUCE_CHUNKSTEPS 4 = 2 MiB.
size_t nccl_ring_chunk_elems(size_t elem_size) { return (size_t{4} << 20) / 8 * 4 / elem_size; }

std::vector<NcclChunk> nccl_ring_chunks(size_t n, size_t N, size_t C, size_t elem_size) {
  const size_t align = 16 / elem_size;
  std::vector<NcclChunk> out;
  const size_t loop = N * C;
  for (size_t offset = 0; offset < n; offset += loop) {
    const size_t rem = n - offset;
    size_t c_elems = C;
    // alignUp(divUp(remCount, nranks), 16 / sizeof(T))
    if (rem < loop) c_elems = (rem + N - 1) / N, c_elems = (c_elems + align - 1) / align * align;
    for (size_t c = 0; c < N; ++c) {
      const size_t b = std::min(rem, c * c_elems), e = std::min(rem, (c + 1) * c_elems);
      if (b < e) out.push_back({offset + b, offset + e, (c + 1) % N, c});
    }
    if (rem < loop) break;  // the shortened loop covered the rest
  }
  return out;
}

template <typename T>
void nccl_ring_allreduce(const std::vector<T*>& bufs, size_t n, Span span) {
  const size_t N = bufs.size();
  if (N == 1) return;
  for (NcclChunk ch : nccl_ring_chunks(n, N, nccl_ring_chunk_elems(sizeof(T)), sizeof(T))) {
    ch.begin = std::max(ch.begin, span.lo), ch.end = std::min(ch.end, span.hi);
    if (ch.begin >= ch.end) continue;
    const size_t at = ch.begin - span.lo, len = ch.end - ch.begin;  // bufs[r] + at is element ch.begin
    // Reduce-scatter: the partial sum travels first, first + 1, ..., owner; each adds its own value.
    T* acc = bufs[ch.first] + at;
    for (size_t s = 1; s < N; ++s) {
      T* next = bufs[(ch.first + s) % N] + at;
      for (size_t i = 0; i < len; ++i) next[i] = acc[i] + next[i];  // received + mine
      acc = next;
    }
    // All-gather: the owner's result is copied to every other position.
    for (size_t r = 0; r < N; ++r) {
      if (r != ch.owner) std::copy(acc, acc + len, bufs[r] + at);
    }
  }
}
DDPLAB_COLLECTIVE_INSTANTIATE(nccl_ring_allreduce)

}  // namespace ddplab::collective
