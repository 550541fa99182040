// A measured all-reduce order (src/collective/measured.h) replayed: the chain orders read off each in-process
// algorithm, replayed by chain_allreduce, give that algorithm's bits; the algorithms that are no chain (a tree
// or halving-doubling from 4 ranks on) are said to be none; malformed orders are refused.
#include "src/collective/measured.h"

#include <gtest/gtest.h>

#include "src/data/torch_rng.h"

namespace ddplab::collective {
namespace {

std::vector<std::vector<float>> seeded(size_t N, size_t n) {
  std::vector<std::vector<float>> x;
  for (size_t r = 0; r < N; ++r) x.push_back(Generator(100 + r).randn(static_cast<int64_t>(n)));
  return x;
}

std::vector<float*> pointers(std::vector<std::vector<float>>& x) {
  std::vector<float*> p;
  for (auto& v : x) p.push_back(v.data());
  return p;
}

TEST(MeasuredOrder, ChainsReplayTheirAlgorithmBitForBit) {
  for (Algorithm a : {Algorithm::ring, Algorithm::nccl_ring, Algorithm::naive, Algorithm::tree,
                      Algorithm::halving_doubling}) {
    for (size_t N : {3, 4, 5, 8}) {
      for (size_t n : {1, 7, 1000, 4099}) {
        const MeasuredOrder o = chain_order_of(a, N, n);
        // Every ring is a chain; a tree is one up to 5 ranks ((x0 + (x1 + x3)) + x2 at 4), not at 8, where two
        // subtrees' sums meet; halving-doubling adds pairs' sums from 4 ranks on.
        const bool chain = a == Algorithm::ring || a == Algorithm::nccl_ring || a == Algorithm::naive ||
                           (a == Algorithm::tree && N <= 5) || (a == Algorithm::halving_doubling && N == 3);
        EXPECT_EQ(!o.runs.empty(), chain) << algorithm_name(a) << " N=" << N << " n=" << n;
        if (o.runs.empty()) continue;
        EXPECT_EQ(check_measured(o, N), "");
        auto want = seeded(N, n), got = seeded(N, n);
        allreduce_sum(a, pointers(want), n);
        chain_allreduce(o, pointers(got));
        size_t equal = 0;
        for (size_t r = 0; r < N; ++r)
          for (size_t i = 0; i < n; ++i) equal += got[r][i] == want[r][i];
        EXPECT_EQ(equal, N * n) << algorithm_name(a) << " N=" << N << " n=" << n;
      }
    }
  }
}

TEST(MeasuredOrder, TheOrderMattersAtThreeRanks) {
  // Gloo's ring starts each chunk at another rank; the rank-order sum starts every element at rank 0: at 3
  // ranks they differ somewhere, so a replay in the wrong order would be seen.
  const size_t N = 3, n = 4099;
  auto ring = seeded(N, n), naive = seeded(N, n);
  chain_allreduce(chain_order_of(Algorithm::ring, N, n), pointers(ring));
  chain_allreduce(chain_order_of(Algorithm::naive, N, n), pointers(naive));
  EXPECT_NE(ring[0], naive[0]);
}

TEST(MeasuredOrder, MalformedOrdersAreRefused) {
  MeasuredOrder o{10, {{0, 5, {0, 1, 2}}, {5, 10, {2, 1, 0}}}};
  EXPECT_EQ(check_measured(o, 3), "");
  EXPECT_NE(check_measured(o, 4), "");                                           // 3 ranks ordered, not 4
  EXPECT_NE(check_measured({10, {{0, 5, {0, 1, 2}}, {6, 10, {0, 1, 2}}}}, 3), "");  // a gap
  EXPECT_NE(check_measured({10, {{0, 5, {0, 1, 2}}}}, 3), "");                      // short of n
  EXPECT_NE(check_measured({10, {{0, 10, {0, 0, 2}}}}, 3), "");                     // no permutation
  EXPECT_NE(check_measured({10, {{0, 10, {0, 1, 3}}}}, 3), "");                     // a rank out of range
}

}  // namespace
}  // namespace ddplab::collective
