// Binary-tree all-reduce: rank i's children are 2i+1 and 2i+2. Each rank adds its children's subtree
// sums to its own data, left child first, and passes the result up; rank 0 then broadcasts down.
//   v_i = (x_i + v_{2i+1}) + v_{2i+2}         result = v_0
// For N = 3 that is (x0 + x1) + x2, the rank-order sum; for N >= 4 the grouping differs from it.
#include <algorithm>

#include "src/collective/allreduce.h"

namespace ddplab::collective {

template <typename T>
void tree_allreduce(const std::vector<T*>& bufs, size_t /*n*/, Span span) {
  const size_t N = bufs.size();
  for (size_t i = N; i-- > 0;) {  // children before parents
    for (size_t c : {2 * i + 1, 2 * i + 2}) {
      if (c >= N) continue;
      for (size_t e = 0; e < span.hi - span.lo; ++e) bufs[i][e] = bufs[i][e] + bufs[c][e];
    }
  }
  for (size_t i = 1; i < N; ++i) {
    const T* parent = bufs[(i - 1) / 2];
    std::copy(parent, parent + (span.hi - span.lo), bufs[i]);
  }
}
DDPLAB_COLLECTIVE_INSTANTIATE(tree_allreduce)

}  // namespace ddplab::collective
