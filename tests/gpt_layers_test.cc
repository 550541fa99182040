// src/nn/ LayerNorm and Embedding against torch 1.13 on CPU, one thread: the committed goldens
// (tests/golden/layers/make_gpt_layer_goldens.py) and, where /usr/bin/python3 has torch, the same cases plus
// larger ones from fresh random values. Each tensor prints whether it is bit for bit torch's and its largest
// distance in ulps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/nn/embedding.h"
#include "src/nn/layernorm.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::json;

// Totals over a whole check, printed at its end.
struct Tally {
  int64_t tensors = 0, exact_tensors = 0, values = 0, exact_values = 0, worst = 0;
};

// Prints "label: exact yes N/N bitwise, max ulps K" (only for mismatches unless verbose) and returns the max
// ulps (-1 when the sizes differ).
int64_t ulps(const std::string& label, const std::vector<float>& got, const std::vector<float>& want, Tally& tally,
             bool verbose) {
  const testing::Bits b = testing::bits(got, want);
  if (!b.sizes_match || verbose || !b.exact()) testing::print_bits(label, got, want, 60);
  if (!b.sizes_match) return -1;
  tally.tensors += 1;
  tally.exact_tensors += b.exact();
  tally.values += b.total;
  tally.exact_values += b.equal;
  tally.worst = std::max(tally.worst, b.worst);
  return b.worst;
}

void print_tally(const std::string& what, const Tally& t) {
  std::printf("%s: %lld/%lld tensors bitwise, %lld/%lld values bitwise, max ulps %lld\n", what.c_str(),
              static_cast<long long>(t.exact_tensors), static_cast<long long>(t.tensors),
              static_cast<long long>(t.exact_values), static_cast<long long>(t.values),
              static_cast<long long>(t.worst));
}

// Every case runs the whole chain from x: our forward's mean and rstd feed our backward.
void check_layer_norm(const json& doc, const std::string& src, bool verbose) {
  Tally tally;
  const float eps = static_cast<float>(doc["eps"].get<double>());
  for (const json& c : doc["layer_norm"]) {
    const int64_t M = c["M"], C = c["C"];
    const std::string affine = c["affine"];
    const std::string label = src + " layer_norm [" + std::to_string(M) + "," + std::to_string(C) + "] " + affine + " ";
    const auto x = testing::floats(c["x"]), dy = testing::floats(c["grad_y"]);
    const bool has_w = c.contains("weight"), has_b = c.contains("bias");
    const std::vector<float> w = has_w ? testing::floats(c["weight"]) : std::vector<float>();
    const std::vector<float> b = has_b ? testing::floats(c["bias"]) : std::vector<float>();
    std::vector<float> y(x.size()), mean(M), rstd(M), dx(x.size()), dw(C), db(C);
    nn::layer_norm_forward(x.data(), has_w ? w.data() : nullptr, has_b ? b.data() : nullptr, y.data(), mean.data(),
                           rstd.data(), M, C, eps);
    nn::layer_norm_backward(dy.data(), x.data(), mean.data(), rstd.data(), has_w ? w.data() : nullptr, dx.data(),
                            has_w ? dw.data() : nullptr, has_b ? db.data() : nullptr, M, C);
    EXPECT_EQ(ulps(label + "y", y, testing::floats(c["y"]), tally, verbose), 0) << label;
    EXPECT_EQ(ulps(label + "mean", mean, testing::floats(c["mean"]), tally, verbose), 0) << label;
    EXPECT_EQ(ulps(label + "rstd", rstd, testing::floats(c["rstd"]), tally, verbose), 0) << label;
    EXPECT_EQ(ulps(label + "grad_x", dx, testing::floats(c["grad_x"]), tally, verbose), 0) << label;
    if (has_w) {
      EXPECT_EQ(ulps(label + "grad_weight", dw, testing::floats(c["grad_weight"]), tally, verbose), 0);
    }
    if (has_b) {
      EXPECT_EQ(ulps(label + "grad_bias", db, testing::floats(c["grad_bias"]), tally, verbose), 0);
    }
  }
  print_tally(src + " layer_norm", tally);
  EXPECT_GT(tally.tensors, 0);
}

// Rows with a trend (x, mean and rstd only): they show the one merge in RowwiseMoments whose products are
// inexact, which the cases above rarely reach.
void check_moments(const json& doc, const std::string& src, bool verbose) {
  Tally tally;
  const float eps = static_cast<float>(doc["eps"].get<double>());
  for (const json& c : doc["layer_norm_moments"]) {
    const int64_t M = c["M"], C = c["C"];
    const std::string label = src + " layer_norm moments [" + std::to_string(M) + "," + std::to_string(C) + "] ";
    const auto x = testing::floats(c["x"]);
    std::vector<float> y(x.size()), mean(M), rstd(M);
    nn::layer_norm_forward(x.data(), nullptr, nullptr, y.data(), mean.data(), rstd.data(), M, C, eps);
    EXPECT_EQ(ulps(label + "mean", mean, testing::floats(c["mean"]), tally, verbose), 0) << label;
    EXPECT_EQ(ulps(label + "rstd", rstd, testing::floats(c["rstd"]), tally, verbose), 0) << label;
  }
  print_tally(src + " layer_norm moments", tally);
  EXPECT_GT(tally.tensors, 0);
}

void check_embedding(const json& doc, const std::string& src, bool verbose) {
  Tally tally;
  for (const json& c : doc["embedding"]) {
    const int64_t V = c["num_embeddings"], D = c["dim"];
    const std::vector<int64_t> idx = testing::ints(c["idx"]);
    const int64_t n = static_cast<int64_t>(idx.size());
    const std::string label =
        src + " embedding V=" + std::to_string(V) + " dim=" + std::to_string(D) + " n=" + std::to_string(n) + " ";
    const auto weight = testing::floats(c["weight"]), dout = testing::floats(c["grad_out"]);
    std::vector<float> out(n * D), dw(V * D, -1.0f);  // -1: the backward must overwrite every row
    nn::embedding_forward(idx.data(), n, weight.data(), D, out.data());
    nn::embedding_backward(dout.data(), idx.data(), n, V, D, dw.data());
    EXPECT_EQ(ulps(label + "out", out, testing::floats(c["out"]), tally, verbose), 0) << label;
    EXPECT_EQ(ulps(label + "grad_weight", dw, testing::floats(c["grad_weight"]), tally, verbose), 0) << label;
  }
  print_tally(src + " embedding", tally);
  EXPECT_GT(tally.tensors, 0);
}

const json& goldens() {
  static const json doc = testing::load_json("tests/golden/layers/gpt_layers.json");
  return doc;
}

TEST(LayerNorm, MatchesTorchGoldens) { check_layer_norm(goldens(), "golden", /*verbose=*/true); }
TEST(LayerNorm, MomentsMatchTorchGoldens) { check_moments(goldens(), "golden", /*verbose=*/true); }
TEST(Embedding, MatchesTorchGoldens) { check_embedding(goldens(), "golden", /*verbose=*/true); }

// The goldens repeat tokens: a check that they do (else the backward's order of adds would go untested).
TEST(Embedding, GoldensRepeatTokens) {
  int64_t repeats = 0;
  for (const json& c : goldens()["embedding"]) {
    const std::vector<int64_t> idx = testing::ints(c["idx"]);
    std::vector<int64_t> sorted = idx;
    std::sort(sorted.begin(), sorted.end());
    repeats += static_cast<int64_t>(idx.size()) - (std::unique(sorted.begin(), sorted.end()) - sorted.begin());
  }
  std::printf("repeated token occurrences in the embedding goldens: %lld\n", static_cast<long long>(repeats));
  EXPECT_GT(repeats, 100);
}

TEST(Embedding, BackwardRefusesAnIndexOutsideTheTable) {
  const std::vector<int64_t> idx = {0, 3};
  std::vector<float> dout(2 * 2, 1.0f), dw(3 * 2);
  EXPECT_THROW(nn::embedding_backward(dout.data(), idx.data(), 2, 3, 2, dw.data()), std::out_of_range);
}

TEST(GptLayers, LiveAgainstTorch) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: live layer check skipped";
  const std::string out = testing::temp_dir() + "/live.json";
  const testing::CommandResult r =
      testing::run_command({"/usr/bin/python3", "tests/golden/layers/make_gpt_layer_goldens.py", "--out", out, "--seed",
                            "20261124", "--big"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json doc = testing::load_json(out);
  check_layer_norm(doc, "live", /*verbose=*/false);
  check_moments(doc, "live", /*verbose=*/false);
  check_embedding(doc, "live", /*verbose=*/false);
}

}  // namespace
}  // namespace ddplab
