// src/nn's Conv2d and MaxPool2d kernels bit for bit against torch 1.13 (tests/golden/layers/, written by
// tests/golden/layers/make_conv_goldens.py): forward, every gradient, reset_parameters' draws, and which
// algorithm torch ran (oneDNN or slow_conv2d). Two targets run this file:
//   conv2d_test       the committed goldens, with the kernels pinned as the generator pinned them (tests/BUILD);
//   conv2d_live_test  the generator run live on this machine's own kernels (skipped without torch).
// Each tensor prints "label: equal/total bitwise, max N ulps".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "src/nn/conv2d.h"
#include "src/nn/conv2d_impl.h"
#include "src/nn/maxpool2d.h"
#include "src/data/torch_rng.h"
#include "tests/testing.h"

namespace ddplab::nn {
namespace {

using testing::json;

// Numbers, or "nan" / "inf" / "-inf" (the generator's spelling of the values JSON has no numbers for).
std::vector<float> values(const json& j) {
  std::vector<float> out;
  for (const auto& v : j) {
    if (v.is_number()) {
      out.push_back(v.get<float>());
    } else {
      const std::string s = v.get<std::string>();
      out.push_back(s == "nan" ? std::numeric_limits<float>::quiet_NaN()
                               : (s == "-inf" ? -1.0f : 1.0f) * std::numeric_limits<float>::infinity());
    }
  }
  return out;
}

// Distance in units in the last place (floats ordered as integers); NaN against NaN is 0.
int64_t ulps(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<int64_t>::max();
  const auto key = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? int64_t{std::numeric_limits<int32_t>::min()} - i : int64_t{i};
  };
  return std::llabs(key(a) - key(b));
}

// Prints the comparison and says whether every value is bitwise equal (NaN = NaN).
bool exact(const std::string& label, const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size()) << label;
  int64_t equal = 0, worst = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const bool same = std::memcmp(&got[i], &want[i], sizeof(float)) == 0 || (std::isnan(got[i]) && std::isnan(want[i]));
    equal += same;
    if (!same) worst = std::max(worst, ulps(got[i], want[i]));
  }
  std::printf("%s: %lld/%zu bitwise, max %lld ulps\n", label.c_str(), static_cast<long long>(equal), want.size(),
              static_cast<long long>(worst));
  return got.size() == want.size() && equal == static_cast<int64_t>(want.size());
}

Conv2dShape conv_shape(const json& c) {
  return Conv2dShape{c["n"], c["c_in"], c["h"], c["w"], c["c_out"], c["kernel"], c["stride"], c["padding"], c["bias"]};
}

std::string describe(const Conv2dShape& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "conv2d x[%lld,%lld,%lld,%lld] %lld->%lld k%lld s%lld p%lld%s",
                static_cast<long long>(s.n), static_cast<long long>(s.c_in), static_cast<long long>(s.h),
                static_cast<long long>(s.w), static_cast<long long>(s.c_in), static_cast<long long>(s.c_out),
                static_cast<long long>(s.kernel), static_cast<long long>(s.stride), static_cast<long long>(s.padding),
                s.bias ? "" : " no bias");
  return buf;
}

// One conv case: inputs drawn as the generator drew them, then the default dispatch against torch's default
// run, and slow_conv2d against torch under mkldnn.flags(enabled=False) where the file has that run.
void check_conv_case(const json& c) {
  const Conv2dShape s = conv_shape(c);
  const std::string label = describe(s);
  const bool want_grad_x = c["grad_x"];
  const int64_t nx = s.n * s.c_in * s.h * s.w, nw = s.c_out * s.c_in * s.kernel * s.kernel,
                ny = s.n * s.c_out * s.out_h() * s.out_w();
  Generator gen(c["seed"].get<uint64_t>());
  std::vector<float> w(nw), b(s.c_out);
  conv2d_reset_parameters(gen, s, w.data(), b.data());
  EXPECT_TRUE(exact(label + " reset_parameters weight", w, values(c["weight"])));
  if (s.bias) {
    EXPECT_TRUE(exact(label + " reset_parameters bias", b, values(c["bias_values"])));
  }
  const std::vector<float> x = gen.randn(nx);
  const std::vector<float> gy = gen.randn(ny);

  for (const char* run : {"default", "mkldnn_off"}) {
    if (!c.contains(run)) continue;
    const json& r = c[run];
    const bool def = std::string(run) == "default";
    const std::string l = label + (def ? " [" + r["path"].get<std::string>() + "]" : " [slow_conv2d, mkldnn off]");
    if (def) {
      EXPECT_EQ(conv2d_uses_onednn(s), r["path"] == "onednn") << label << ": torch chose " << r["path"];
    }
    std::vector<float> y(ny), gx(want_grad_x ? nx : 0), gw(nw), gb(s.bias ? s.c_out : 0);
    float* gx_ptr = want_grad_x ? gx.data() : nullptr;
    float* gb_ptr = s.bias ? gb.data() : nullptr;
    if (def) {
      conv2d_forward(s, x.data(), w.data(), s.bias ? b.data() : nullptr, y.data());
      conv2d_backward(s, x.data(), w.data(), gy.data(), gx_ptr, gw.data(), gb_ptr);
    } else {
      detail::slow_conv2d_forward(s, x.data(), w.data(), s.bias ? b.data() : nullptr, y.data());
      detail::slow_conv2d_backward(s, x.data(), w.data(), gy.data(), gx_ptr, gw.data(), gb_ptr);
    }
    EXPECT_TRUE(exact(l + " y", y, values(r["y"])));
    if (want_grad_x) {
      EXPECT_TRUE(exact(l + " grad_x", gx, values(r["grad_x"])));
    }
    EXPECT_TRUE(exact(l + " grad_w", gw, values(r["grad_w"])));
    if (s.bias) {
      EXPECT_TRUE(exact(l + " grad_b", gb, values(r["grad_b"])));
    }
  }
}

// Which algorithm torch ran, on shapes around use_mkldnn()'s thresholds.
void check_dispatch(const json& cases) {
  int64_t agree = 0;
  for (const auto& c : cases) {
    const Conv2dShape s = conv_shape(c);
    const bool same = conv2d_uses_onednn(s) == (c["path"] == "onednn");
    agree += same;
    EXPECT_TRUE(same) << describe(s) << ": torch ran " << c["path"];
  }
  std::printf("dispatch: %lld/%zu shapes take torch's algorithm\n", static_cast<long long>(agree), cases.size());
}

void check_init_sequence(const json& g) {
  Generator gen(g["seed"].get<uint64_t>());
  const std::vector<Conv2dShape> layers = {
      {1, 1, 8, 8, 8, 3, 1, 1, true}, {1, 8, 8, 8, 16, 3, 1, 1, false}, {1, 16, 8, 8, 4, 1, 1, 0, true}};
  std::vector<float> drawn;
  for (const auto& s : layers) {
    std::vector<float> w(s.c_out * s.c_in * s.kernel * s.kernel), b(s.c_out);
    conv2d_reset_parameters(gen, s, w.data(), b.data());
    drawn.insert(drawn.end(), w.begin(), w.end());
    if (s.bias) drawn.insert(drawn.end(), b.begin(), b.end());
  }
  std::vector<float> want;
  for (const auto& p : g["params"]) {
    const auto v = values(p);
    want.insert(want.end(), v.begin(), v.end());
  }
  EXPECT_TRUE(exact("Conv2d(1,8,3) Conv2d(8,16,3,bias=False) Conv2d(16,4,1) drawn in a row", drawn, want));
}

void check_pool_case(const json& c) {
  const MaxPool2dShape s{c["n"], c["c"], c["h"], c["w"], c["kernel"], c["stride"], c["padding"]};
  const int64_t nx = s.n * s.c * s.h * s.w, ny = s.n * s.c * s.out_h() * s.out_w();
  Generator gen(c["seed"].get<uint64_t>());
  std::vector<float> x = gen.randn(nx);
  for (float& v : x) {
    const float r = std::nearbyint(v * 2.0f) / 2.0f;  // torch.round: half to even
    v = r > 0.0f ? r : 0.0f;
  }
  for (int64_t i : c["nan_at"].get<std::vector<int64_t>>()) x[i] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i : c["neg_inf_at"].get<std::vector<int64_t>>()) x[i] = -std::numeric_limits<float>::infinity();
  std::vector<float> y(ny), gx(nx);
  std::vector<int64_t> ind(ny);
  maxpool2d_forward(s, x.data(), y.data(), ind.data());
  const std::vector<float> gy = gen.randn(ny);
  maxpool2d_backward(s, ind.data(), gy.data(), gx.data());
  char label[128];
  std::snprintf(label, sizeof label, "maxpool2d x[%lld,%lld,%lld,%lld] k%lld s%lld p%lld", static_cast<long long>(s.n),
                static_cast<long long>(s.c), static_cast<long long>(s.h), static_cast<long long>(s.w),
                static_cast<long long>(s.kernel), static_cast<long long>(s.step()), static_cast<long long>(s.padding));
  EXPECT_TRUE(exact(std::string(label) + " y", y, values(c["y"])));
  const auto want_ind = c["indices"].get<std::vector<int64_t>>();
  int64_t same = 0;
  for (size_t i = 0; i < want_ind.size() && i < ind.size(); ++i) same += ind[i] == want_ind[i];
  std::printf("%s indices: %lld/%zu equal\n", label, static_cast<long long>(same), want_ind.size());
  EXPECT_EQ(ind, want_ind) << label;
  EXPECT_TRUE(exact(std::string(label) + " grad_x", gx, values(c["grad_x"])));
}

bool live_target() { return std::getenv("DDPLAB_CONV2D_LIVE") != nullptr; }  // set by conv2d_live_test

TEST(Conv2d, MatchesTorchGoldens) {
  if (live_target()) GTEST_SKIP() << "conv2d_live_test compares against live torch instead";
  const json g = testing::load_json("tests/golden/layers/conv2d.json");
  for (const auto& c : g["cases"]) check_conv_case(c);
  check_init_sequence(g["init_sequence"]);
  check_dispatch(g["dispatch"]);
}

TEST(MaxPool2d, MatchesTorchGoldens) {
  if (live_target()) GTEST_SKIP() << "conv2d_live_test compares against live torch instead";
  for (const auto& c : testing::load_json("tests/golden/layers/maxpool2d.json")["cases"]) check_pool_case(c);
}

TEST(Conv2dLive, MatchesTorchOnThisMachine) {
  if (!live_target()) GTEST_SKIP() << "run by conv2d_live_test (unpinned kernels)";
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: live check skipped";
  const std::string out = testing::temp_dir() + "/layers.json";
  const auto r = testing::run_command({"/usr/bin/python3", "tests/golden/layers/make_conv_goldens.py", "--live", out});
  ASSERT_EQ(r.status, 0) << r.err;
  const json doc = testing::load_json(out);
  for (const auto& c : doc["conv2d"]["cases"]) check_conv_case(c);
  check_init_sequence(doc["conv2d"]["init_sequence"]);
  check_dispatch(doc["conv2d"]["dispatch"]);
  for (const auto& c : doc["maxpool2d"]["cases"]) check_pool_case(c);
}

// ddplab runs replicas on parallel threads: each call must still be torch's one-thread computation. Four
// threads at once, each running both digits convolutions at batch 1 (slow_conv2d), 7 and 32 (oneDNN) over
// and over, must get the bits one thread gets alone.
TEST(Conv2d, SameBitsFromParallelThreads) {
  const std::vector<Conv2dShape> shapes = {{1, 1, 8, 8, 8, 3, 1, 1, true},  {7, 1, 8, 8, 8, 3, 1, 1, true},
                                           {32, 1, 8, 8, 8, 3, 1, 1, true}, {1, 8, 4, 4, 16, 3, 1, 1, true},
                                           {7, 8, 4, 4, 16, 3, 1, 1, true}, {32, 8, 4, 4, 16, 3, 1, 1, true}};
  // Everything one pass computes, concatenated.
  const auto pass = [&](uint64_t seed) {
    std::vector<float> all;
    for (const auto& s : shapes) {
      Generator gen(seed);
      std::vector<float> w(s.c_out * s.c_in * s.kernel * s.kernel), b(s.c_out);
      conv2d_reset_parameters(gen, s, w.data(), b.data());
      const auto x = gen.randn(s.n * s.c_in * s.h * s.w);
      const auto gy = gen.randn(s.n * s.c_out * s.out_h() * s.out_w());
      std::vector<float> y(gy.size()), gx(x.size()), gw(w.size()), gb(b.size());
      conv2d_forward(s, x.data(), w.data(), b.data(), y.data());
      conv2d_backward(s, x.data(), w.data(), gy.data(), gx.data(), gw.data(), gb.data());
      for (const auto* v : {&y, &gx, &gw, &gb}) all.insert(all.end(), v->begin(), v->end());
    }
    return all;
  };
  constexpr int kThreads = 4, kRounds = 20;
  std::vector<std::vector<float>> alone(kThreads);
  for (int t = 0; t < kThreads; ++t) alone[t] = pass(1000 + t);
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) mismatches[t] += pass(1000 + t) != alone[t];
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    std::printf("thread %d: %d/%d passes differ from the one-thread run (%zu floats each)\n", t, mismatches[t], kRounds,
                alone[t].size());
    EXPECT_EQ(mismatches[t], 0);
  }
}

TEST(Conv2d, RefusesBadShapes) {
  EXPECT_STREQ(conv2d_check({1, 1, 8, 8, 8, 3, 1, 1, true}), "");
  EXPECT_STRNE(conv2d_check({1, 1, 2, 2, 8, 5, 1, 1, true}), "");  // kernel larger than the padded input
  EXPECT_STRNE(conv2d_check({1, 1, 8, 8, 8, 3, 0, 1, true}), "");  // stride 0
  EXPECT_STRNE(conv2d_check({0, 1, 8, 8, 8, 3, 1, 1, true}), "");  // empty batch
  std::vector<float> buf(1000);
  EXPECT_THROW(conv2d_forward({1, 1, 2, 2, 8, 5, 1, 1, true}, buf.data(), buf.data(), buf.data(), buf.data()),
               std::invalid_argument);
  EXPECT_STREQ(maxpool2d_check({1, 1, 4, 4, 2}), "");
  EXPECT_STRNE(maxpool2d_check({1, 1, 4, 4, 2, 2, 2}), "");  // padding above half the kernel
}

}  // namespace
}  // namespace ddplab::nn
