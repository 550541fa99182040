// Naive all-reduce: rank 0 sums everyone's data in rank order, then every rank copies the result.
//   result[i] = ((x0[i] + x1[i]) + x2[i]) + ... + x{N-1}[i]
// This is notebook 000's (W1_0.grad + W1_1.grad) written for N ranks.
#include <algorithm>

#include "src/collective/allreduce.h"

namespace ddplab::collective {

template <typename T>
void naive_allreduce(const std::vector<T*>& bufs, size_t /*n*/, Span span) {
  const size_t len = span.hi - span.lo;
  T* acc = bufs[0];
  for (size_t r = 1; r < bufs.size(); ++r) {
    for (size_t i = 0; i < len; ++i) acc[i] = acc[i] + bufs[r][i];
  }
  for (size_t r = 1; r < bufs.size(); ++r) std::copy(acc, acc + len, bufs[r]);
}
DDPLAB_COLLECTIVE_INSTANTIATE(naive_allreduce)

}  // namespace ddplab::collective
