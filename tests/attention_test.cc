// src/nn/attention (nanoGPT's causal self-attention core) against torch 1.13 on CPU, one thread: the committed
// goldens (tests/golden/layers/make_attention_goldens.py) and, where /usr/bin/python3 has torch, the same
// cases from fresh random values. Each case prints whether y and dqkv are bit for bit torch's and their
// largest distance in ulps, and which bmm path (naive loop or sgemm) its products took.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/nn/attention.h"
#include "src/data/torch_rng.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::json;

// Prints "label: exact yes N/N bitwise, max ulps K" and returns the max ulps (-1 when the sizes differ).
int64_t ulps(const std::string& label, const std::vector<float>& got, const std::vector<float>& want) {
  const testing::Bits b = testing::print_bits(label, got, want, 60);
  return b.sizes_match ? b.worst : -1;
}

struct Totals {
  int cases = 0, naive = 0, gemm = 0;
};

Totals check_attention(const json& doc, const std::string& src) {
  Totals totals;
  for (const json& c : doc["cases"]) {
    const int64_t B = c["B"], T = c["T"], C = c["C"], nh = c["n_head"];
    const double p = c["dropout"];
    const bool training = c["training"];
    const bool gemm = T * T * (C / nh) >= 400;  // bmm_out_or_baddbmm_'s threshold, the same for all four products
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s B=%lld T=%lld C=%lld nh=%lld p=%g %s %s", src.c_str(), (long long)B,
                  (long long)T, (long long)C, (long long)nh, p, training ? "train" : "eval", gemm ? "sgemm" : "naive");
    const std::string at = buf;
    const auto qkv = testing::floats(c["qkv"]), dy = testing::floats(c["dy"]);
    std::vector<float> y(static_cast<size_t>(B * T * C)), dqkv(qkv.size(), -1.0f);
    Generator gen(c["seed"].get<uint64_t>());
    nn::AttentionCache cache;
    nn::causal_attention_forward(qkv.data(), B, T, C, nh, p, training, gen, y.data(), cache);
    // The dropout drew exactly as many values as torch's: the generator's next draw agrees.
    EXPECT_EQ(gen.random_int64(), c["next_int64"].get<int64_t>()) << at;
    nn::causal_attention_backward(dy.data(), cache, dqkv.data());
    EXPECT_EQ(ulps(at + " y", y, testing::floats(c["y"])), 0) << at;
    EXPECT_EQ(ulps(at + " dqkv", dqkv, testing::floats(c["dqkv"])), 0) << at;
    ++totals.cases;
    ++(gemm ? totals.gemm : totals.naive);
  }
  std::printf("%s: %d cases (%d through the naive bmm loop, %d through sgemm)\n", src.c_str(), totals.cases,
              totals.naive, totals.gemm);
  return totals;
}

TEST(Attention, MatchesTorchGoldens) {
  const json doc = testing::load_json("tests/golden/layers/attention.json");
  const Totals t = check_attention(doc, "golden");
  EXPECT_GT(t.naive, 0);  // both sides of the 400 threshold are covered
  EXPECT_GT(t.gemm, 0);
}

TEST(Attention, LiveAgainstTorch) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: live attention check skipped";
  const std::string out = testing::temp_dir() + "/live.json";
  const testing::CommandResult r = testing::run_command(
      {"/usr/bin/python3", "tests/golden/layers/make_attention_goldens.py", "--out", out, "--seed", "20261124"});
  ASSERT_EQ(r.status, 0) << r.err;
  check_attention(testing::load_json(out), "live");
}

TEST(Attention, MaskedPositionsGetExactZeros) {
  // Row i of the softmax is 0 beyond column i whatever the scores, so y's first token is v's first token.
  const int64_t B = 1, T = 4, C = 8, nh = 2;
  std::vector<float> qkv(static_cast<size_t>(B * T * 3 * C)), y(static_cast<size_t>(B * T * C));
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = std::sin(static_cast<float>(i)) * 5.0f;
  Generator gen(1);
  nn::AttentionCache cache;
  nn::causal_attention_forward(qkv.data(), B, T, C, nh, 0.0, true, gen, y.data(), cache);
  for (int64_t r = 0; r < nh * T; ++r) {
    for (int64_t j = r % T + 1; j < T; ++j) EXPECT_EQ(cache.att[r * T + j], 0.0f);
  }
  for (int64_t d = 0; d < C; ++d) EXPECT_EQ(y[d], qkv[2 * C + d]);
  EXPECT_TRUE(cache.noise.empty());
}

TEST(Attention, RefusesBadSizes) {
  std::vector<float> buf(64);
  Generator gen(1);
  nn::AttentionCache cache;
  EXPECT_THROW(nn::causal_attention_forward(buf.data(), 1, 2, 6, 4, 0.0, true, gen, buf.data(), cache),
               std::invalid_argument);  // 6 % 4 != 0
  EXPECT_THROW(nn::causal_attention_forward(buf.data(), 1, 2, 4, 1, 1.5, true, gen, buf.data(), cache),
               std::invalid_argument);  // p > 1
  EXPECT_THROW(nn::causal_attention_backward(buf.data(), nn::AttentionCache{}, buf.data()), std::invalid_argument);
}

}  // namespace
}  // namespace ddplab
