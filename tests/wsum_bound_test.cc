// The whole-run steps' check of the all-reduce against rounding (src/check/rounding_bound.h) from both sides:
// no all-reduce that only rounds ever exceeds the bound (any order, chain or tree, with or without accumulation,
// predivided or postdivided, world sizes 3 to 8, data from tame to cancelling to subnormal), and a result with
// one element wrong by more than twice the bound always does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "src/check/replay/rounding_bound.h"

namespace {

// The recorder's weights (verify/ddplab_trace/digests.py, _wsum_weights).
double weight(size_t i) {
  const uint64_t j = i % 1021;
  return 1.0 + static_cast<double>((j * 2654435761ull) % (1u << 20)) / static_cast<double>(1u << 20);
}

double wsum(const std::vector<float>& x, bool absolute) {
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += weight(i) * (absolute ? std::fabs(static_cast<double>(x[i])) : x[i]);
  return s;
}

enum class Data { normal, wide, cancelling, subnormal };

float draw(std::mt19937_64& rng, Data d, size_t r) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> e(-60.0, 60.0);
  switch (d) {
    case Data::normal: return normal(rng);
    case Data::wide: return static_cast<float>((rng() & 1 ? 1.0 : -1.0) * std::exp2(e(rng)));
    case Data::cancelling: return (r % 2 ? -1.0f : 1.0f) * (1.0f + 1e-6f * normal(rng));
    case Data::subnormal: return 1e-40f * normal(rng);
  }
  return 0.0f;
}

// One all-reduce of `ws` ranks' contributions, each accumulated from terms+1 tensors, in a random chain or
// tree order; predivided (x * float(1/ws)) or postdivided. Returns |S(result) - E| / bound, and with one
// element of the result moved by more than twice the bound, whether the check sees it.
struct Outcome {
  double ratio;
  bool perturbed_seen;
};

Outcome trial(std::mt19937_64& rng, size_t ws, size_t n, int terms, bool predivide, Data d) {
  std::vector<std::vector<float>> c(ws, std::vector<float>(n));
  double s = 0.0, a = 0.0;
  for (size_t r = 0; r < ws; ++r)
    for (int k = 0; k <= terms; ++k) {
      std::vector<float> t(n);
      for (float& v : t) v = draw(rng, d, r);
      s += wsum(t, false), a += wsum(t, true);
      for (size_t i = 0; i < n; ++i) c[r][i] = k ? c[r][i] + t[i] : t[i];  // AccumulateGrad: grad += new
    }
  const float inv = static_cast<float>(1.0 / static_cast<double>(ws));
  std::vector<float> result(n);
  const bool tree = rng() & 1;
  for (size_t i = 0; i < n; ++i) {
    std::vector<float> x(ws);
    for (size_t r = 0; r < ws; ++r) x[r] = predivide ? c[r][i] * inv : c[r][i];
    std::shuffle(x.begin(), x.end(), rng);
    if (tree) {
      while (x.size() > 1) {  // pairwise, as a tree of partial sums
        std::vector<float> y;
        for (size_t j = 0; j + 1 < x.size(); j += 2) y.push_back(x[j] + x[j + 1]);
        if (x.size() % 2) y.push_back(x.back());
        x = y;
      }
    } else {
      for (size_t j = 1; j < ws; ++j) x[0] += x[j];
    }
    result[i] = predivide ? x[0] : x[0] / static_cast<float>(ws);
  }
  const double scale = predivide ? static_cast<double>(inv) : 1.0 / static_cast<double>(ws);
  const double want = scale * s;
  const double bound = ddplab::check::wsum_bound(static_cast<int64_t>(n), static_cast<int64_t>(ws), terms, scale, a);
  Outcome o{std::fabs(wsum(result, false) - want) / bound, false};
  // One element moved: by at least 2.01 bounds (a float's step may be coarser; the actual move is what counts).
  const size_t j = rng() % n;
  const float moved = result[j] + static_cast<float>(4.0 * bound) * (rng() & 1 ? 1.0f : -1.0f);
  const double delta = std::fabs(static_cast<double>(moved) - result[j]);
  if (delta < 2.01 * bound) return {o.ratio, true};  // the float cannot move by that little: nothing to test
  result[j] = moved;
  o.perturbed_seen = std::fabs(wsum(result, false) - want) > bound;
  return o;
}

TEST(WsumBound, RoundingAloneStaysWithinAndOneWrongElementIsSeen) {
  std::mt19937_64 rng(52);
  double worst = 0.0;
  int trials = 0;
  for (size_t ws : {3u, 4u, 5u, 8u})
    for (size_t n : {1u, 7u, 1021u, 3000u})
      for (int terms : {0, 2})
        for (bool predivide : {true, false})
          for (Data d : {Data::normal, Data::wide, Data::cancelling, Data::subnormal})
            for (int rep = 0; rep < 3; ++rep) {
              const Outcome o = trial(rng, ws, n, terms, predivide, d);
              ++trials;
              worst = std::max(worst, o.ratio);
              ASSERT_LE(o.ratio, 1.0) << "world size " << ws << ", n " << n << ", terms " << terms << ", data "
                                      << static_cast<int>(d);
              ASSERT_TRUE(o.perturbed_seen) << "world size " << ws << ", n " << n << ", data " << static_cast<int>(d);
            }
  EXPECT_EQ(trials, 4 * 4 * 2 * 2 * 4 * 3);
  // Not vacuous: the bound is the worst case of each element's additions, and one element's rounding reaches a
  // fair part of it (a single element at world size 3 and no accumulation: about a fifth).
  EXPECT_GT(worst, 0.05);
}

TEST(WsumBound, GrowsWithTheAdditionsAndTheMagnitudes) {
  using ddplab::check::wsum_bound;
  EXPECT_LT(wsum_bound(4096, 3, 0, 1.0 / 3, 100.0), wsum_bound(4096, 8, 0, 1.0 / 3, 100.0));  // more ranks
  EXPECT_LT(wsum_bound(4096, 3, 0, 1.0 / 3, 100.0), wsum_bound(4096, 3, 4, 1.0 / 3, 100.0));  // accumulation
  EXPECT_DOUBLE_EQ(wsum_bound(4096, 3, 0, 1.0 / 3, 200.0) - wsum_bound(4096, 3, 0, 1.0 / 3, 0.0),
                   2 * (wsum_bound(4096, 3, 0, 1.0 / 3, 100.0) - wsum_bound(4096, 3, 0, 1.0 / 3, 0.0)));
  // At world size 3 and no accumulation: 5 roundings of 2^-24, a part in 3.4 million of the magnitudes.
  EXPECT_NEAR(wsum_bound(1, 3, 0, 1.0, 1.0), 5.0 * std::ldexp(1.0, -24), 1e-12);
}

}  // namespace
