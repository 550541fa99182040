// clip_grad_norm_ and norm2 against torch 1.13 (tests/golden/gpt_train/clip_grad.json, made by
// make_gpt_train_goldens.py): the per-grad norms, the total norm and every clipped gradient, and torch.norm over
// every tail length, bitwise.
#include "src/train/clip_grad.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "src/data/torch_rng.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::floats;
using testing::json;

std::string fnv1a(const float* x, int64_t n) {  // as the generator's fnv1a: FNV-1a 64 over the float bytes
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto* b = reinterpret_cast<const unsigned char*>(x);
  for (int64_t i = 0; i < n * 4; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

TEST(ClipGradNorm, NormsAndClippedGradsAreBitExactWithPyTorch) {
  const json golden = testing::load_json("tests/golden/gpt_train/clip_grad.json");
  int64_t equal = 0, total = 0, worst_ulps = 0, cases = 0, clipped_cases = 0;
  for (const auto& c : golden["cases"]) {
    const std::string label = c["name"].get<std::string>() + " scale " + c["scale"].dump();
    // The test draws the gradients as the generator did: manual_seed(seed), randn(numel) * scale per shape.
    Generator gen(c["seed"].get<uint64_t>());
    const float scale = c["scale"].get<float>();
    std::vector<Parameter> storage(c["shapes"].size());
    std::vector<Parameter*> params;
    for (size_t i = 0; i < storage.size(); ++i) {
      Parameter& p = storage[i];
      params.push_back(&p);
      if (c["shapes"][i].is_null()) {  // a parameter without grad
        p.value = Matrix::Zero(2, 1);
        continue;
      }
      int64_t numel = 1;
      for (const auto& d : c["shapes"][i]) numel *= d.get<int64_t>();
      p.value = Matrix::Zero(numel, 1);
      Matrix g(numel, 1);
      gen.normal_(g.data(), numel);
      g *= scale;
      p.accumulate_grad(g);
    }
    std::vector<float> norms, want_norms;
    for (size_t i = 0; i < storage.size(); ++i) {
      if (!storage[i].has_grad) {
        EXPECT_TRUE(c["norms"][i].is_null());
        continue;
      }
      norms.push_back(norm2(storage[i].grad.data(), storage[i].grad.size()));
      want_norms.push_back(c["norms"][i].get<float>());
    }
    const std::vector<float> got_total = {clip_grad_norm_(params, c["max_norm"].get<double>())};
    const std::vector<float> want_total = {c["total_norm"].get<float>()};
    struct Pair {
      std::string what;
      std::vector<float> got, want;
      bool counted;  // a large grad's first 16 values are not: its hash counted them all
    };
    std::vector<Pair> pairs = {{"per-grad norms", norms, want_norms, true},
                               {"total norm", got_total, want_total, true}};
    for (size_t i = 0; i < storage.size(); ++i) {
      const Parameter& p = storage[i];
      const json& want = c["clipped"][i];
      if (!p.has_grad) {
        EXPECT_TRUE(want.is_null());
        continue;
      }
      const std::vector<float> got(p.grad.data(), p.grad.data() + p.grad.size());
      if (want.contains("values")) {
        pairs.push_back({"clipped grad " + std::to_string(i), got, floats(want["values"]), true});
      } else {  // a large grad: its hash and first 16 values
        const bool same = fnv1a(got.data(), static_cast<int64_t>(got.size())) == want["fnv1a"].get<std::string>();
        std::printf("%-40s %zu clipped values: FNV-1a %s torch's\n", label.c_str(), got.size(),
                    same ? "equal to" : "DIFFERS from");
        EXPECT_TRUE(same) << label;
        equal += same ? static_cast<int64_t>(got.size()) : 0;
        total += static_cast<int64_t>(got.size());
        pairs.push_back({"clipped grad " + std::to_string(i) + " [:16]",
                         std::vector<float>(got.begin(), got.begin() + 16), floats(want["head"]), false});
      }
    }
    for (const Pair& q : pairs) {
      const auto m = testing::match(label + " " + q.what, q.got, q.want);
      EXPECT_EQ(m.equal, m.total) << label << " " << q.what;
      if (q.counted) {
        equal += m.equal;
        total += m.total;
      }
      worst_ulps = std::max(worst_ulps, testing::max_ulps(q.got, q.want));
    }
    ++cases;
    clipped_cases += want_total[0] + 1e-6 > c["max_norm"].get<double>();
  }
  std::printf(
      "clip_grad_norm_: %lld cases (%lld with the norm above max_norm), %lld/%lld norms and clipped values "
      "bitwise equal to torch 1.13, max %lld ulps\n",
      static_cast<long long>(cases), static_cast<long long>(clipped_cases), static_cast<long long>(equal),
      static_cast<long long>(total), static_cast<long long>(worst_ulps));
  EXPECT_EQ(cases, 14);
  EXPECT_GT(clipped_cases, 0);
  EXPECT_LT(clipped_cases, cases);
}

// torch.norm(x, 2) on randn vectors of every length 1..40 (every tail length, before and after a block of
// 8) and larger ones, drawn in order from one generator as the golden script drew them.
TEST(Norm2, EveryTailLengthIsBitExactWithPyTorch) {
  const json golden = testing::load_json("tests/golden/gpt_train/clip_grad.json");
  Generator gen(golden["norm2_seed"].get<uint64_t>());
  int64_t equal = 0, total = 0, worst_ulps = 0;
  for (const auto& c : golden["norm2"]) {
    const int64_t n = c["n"];
    std::vector<float> got;
    for (int t = 0; t < c["trials"].get<int>(); ++t) {
      const std::vector<float> x = gen.randn(n);
      got.push_back(norm2(x.data(), n));
    }
    const auto want = floats(c["values"]);
    const auto m = testing::match("torch.norm(randn(" + std::to_string(n) + "), 2)", got, want);
    EXPECT_EQ(m.equal, m.total) << "n " << n;
    equal += m.equal;
    total += m.total;
    worst_ulps = std::max(worst_ulps, testing::max_ulps(got, want));
  }
  std::printf("norm2: %lld/%lld norms bitwise equal to torch.norm, max %lld ulps\n", static_cast<long long>(equal),
              static_cast<long long>(total), static_cast<long long>(worst_ulps));
  EXPECT_GT(total, 1600);
}

TEST(ClipGradNorm, NoGradsGivesZeroAndTouchesNothing) {
  Parameter p;
  p.value = Matrix::Constant(3, 1, 2.0f);
  EXPECT_EQ(clip_grad_norm_({&p}, 1.0), 0.0f);
  EXPECT_FALSE(p.has_grad);
}

}  // namespace
}  // namespace ddplab
