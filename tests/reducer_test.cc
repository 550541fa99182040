// DDP's Reducer against torch 1.13 + Gloo: bucket assignment as torch computes it, and the averaged
// gradients bit for bit when fed the same local gradients (tests/golden/ddp/, make_grad_goldens.py).
#include "src/ddp/reducer.h"

#include <gtest/gtest.h>

#include "src/collective/allreduce.h"
#include "src/ddp/trainer.h"
#include "tests/testing.h"

namespace ddplab::ddp {
namespace {

using testing::floats;
using testing::json;

TEST(Reducer, BucketAssignmentMatchesTorch) {
  const json g = testing::load_json("tests/golden/ddp/bucket_assignment.json");
  for (const auto& c : g["cases"]) {
    std::vector<size_t> bytes;
    for (const auto& n : c["numels"]) bytes.push_back(n.get<size_t>() * 4);
    const auto got =
        assign_buckets(c["order"].get<std::vector<size_t>>(), bytes, c["limits"].get<std::vector<size_t>>());
    EXPECT_EQ(got, c["buckets"].get<std::vector<std::vector<size_t>>>()) << c.dump();
  }
}

// A model's worth of parameters with the shapes of `layers`, values irrelevant.
std::vector<Parameter> make_params(const std::vector<int64_t>& layers, const std::vector<std::string>& names) {
  std::vector<Parameter> ps;
  for (size_t l = 0; l + 1 < layers.size(); ++l) {
    Parameter w, b;
    w.name = names[2 * l];
    w.shape = {layers[l + 1], layers[l]};
    w.value = Matrix::Zero(layers[l + 1], layers[l]);
    b.name = names[2 * l + 1];
    b.shape = {layers[l + 1]};
    b.value = Matrix::Zero(layers[l + 1], 1);
    ps.push_back(w);
    ps.push_back(b);
  }
  return ps;
}

void set_grad(Parameter& p, const std::vector<float>& v) {
  p.grad.resize(p.value.rows(), p.value.cols());
  std::copy(v.begin(), v.end(), p.grad.data());
  p.has_grad = true;
}

// Runs `iterations` of DDP's gradient averaging on torch's local gradients; returns rank 0's averaged grads.
void check_against_torch(const json& g) {
  const int64_t ws = g["world_size"];
  const auto layers = g["layers"].get<std::vector<int64_t>>();
  const auto names = g["names"].get<std::vector<std::string>>();
  std::vector<std::vector<Parameter>> ranks;
  for (int64_t r = 0; r < ws; ++r) ranks.push_back(make_params(layers, names));
  std::vector<std::unique_ptr<Reducer>> reducers;
  for (auto& ps : ranks) {
    std::vector<Parameter*> ptrs;
    for (auto& p : ps) ptrs.push_back(&p);
    reducers.push_back(std::make_unique<Reducer>(ptrs, ws, 25.0, Average::predivide));
  }
  for (size_t it = 0; it < g["iterations"].size(); ++it) {
    const json& iter = g["iterations"][it];
    for (int64_t r = 0; r < ws; ++r) {
      for (size_t i = 0; i < names.size(); ++i) set_grad(ranks[r][i], floats(iter["local"][r][i]));
    }
    std::printf("ws=%lld iteration %zu buckets: %s\n", static_cast<long long>(ws), it, reducers[0]->describe().c_str());
    std::vector<Reducer*> ptrs;
    for (auto& red : reducers) ptrs.push_back(red.get());
    InProcessAllreduce().run(ptrs, collective::Algorithm::ring);
    for (auto& red : reducers) red->finish_sync();
    for (size_t i = 0; i < names.size(); ++i) {
      const Parameter& p = ranks[0][i];
      const auto m = testing::match("ws=" + std::to_string(ws) + " it " + std::to_string(it) + " " + names[i],
                                    {p.grad.data(), p.grad.data() + p.numel()}, floats(iter["averaged"][i]));
      EXPECT_EQ(m.equal, m.total) << "averaged gradient must be bitwise torch's";
    }
  }
}

TEST(Reducer, PredivideRingIsBitwiseTorchDdpOverGloo) {
  for (const char* f : {"tests/golden/ddp/grads_ws3.json", "tests/golden/ddp/grads_ws4.json"}) {
    check_against_torch(testing::load_json(f));
  }
}

TEST(Reducer, LiveMultiBucketAgainstTorch) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: live DDP check skipped";
  // 32-512-512-10: 1.14 MB of parameters, so the rebuilt layout has two buckets (the first one >= 1 MiB).
  const std::string out = testing::temp_dir() + "/grads.json";
  const auto r = testing::run_oracle({"/usr/bin/python3", "tests/golden/ddp/make_grad_goldens.py", "--live", out},
                                     {"tests/golden/ddp/make_grad_goldens.py"}, out);
  ASSERT_EQ(r.status, 0) << r.err;
  check_against_torch(testing::load_json(out));
}

TEST(Reducer, RebuildsInGradientReadyOrder) {
  auto ps = make_params({6, 4, 2}, {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"});
  std::vector<Parameter*> ptrs;
  for (auto& p : ps) ptrs.push_back(&p);
  Reducer red(ptrs, 2, 25.0, Average::predivide);
  EXPECT_EQ(red.describe(), "[layers.0.weight layers.0.bias layers.1.weight layers.1.bias] 38 floats");
  red.finish_sync();
  EXPECT_EQ(red.describe(), "[layers.1.bias layers.1.weight layers.0.bias layers.0.weight] 38 floats");
}

TEST(Reducer, AveragingModes) {
  // ws = 3: predivide multiplies by float(1/3) before the sum; postdivide divides the sum by 3. Different
  // roundings, so different bits on ordinary values; avg (ncclAvg's pre-multiply) equals predivide.
  const std::vector<float> g = {0.1f, -0.7f, 1.3f, 2.9f, -0.01f, 5.5f, 1e-3f, 0.333f};
  std::map<Average, std::vector<float>> result;
  for (Average a : {Average::predivide, Average::postdivide, Average::avg}) {
    std::vector<Parameter> ranks(3);
    std::vector<std::unique_ptr<Reducer>> reds;
    for (int r = 0; r < 3; ++r) {
      ranks[r].name = "p";
      ranks[r].value = Matrix::Zero(8, 1);
      std::vector<float> v = g;
      for (float& x : v) x *= static_cast<float>(r + 1);
      set_grad(ranks[r], v);
      reds.push_back(std::make_unique<Reducer>(std::vector<Parameter*>{&ranks[r]}, 3, 25.0, a));
    }
    std::vector<Reducer*> ptrs;
    for (auto& red : reds) ptrs.push_back(red.get());
    InProcessAllreduce().run(ptrs, collective::Algorithm::naive);
    result[a] = {ranks[0].grad.data(), ranks[0].grad.data() + 8};
    for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(result[a][i], 2.0f * g[i], 1e-6f * std::abs(g[i]) + 1e-9f);
  }
  EXPECT_EQ(result[Average::avg], result[Average::predivide]);
  EXPECT_NE(result[Average::postdivide], result[Average::predivide]);
}

TEST(Reducer, GradientAsBucketViewDividesOnceGradsAliasTheirSlot) {
  // reducer.cpp mark_variable_ready_dense: a grad that is not its bucket view is copied in times
  // float(1/ws); once finalize made it the view (gradient_as_bucket_view), the view is divided by ws.
  // At ws 3 the two differ in bits on ordinary values; zero_grad(set_to_none=True) breaks the alias.
  Parameter p;
  p.name = "w";
  p.value = Matrix::Zero(4, 1);
  const std::vector<float> g = {0.1f, -0.7f, 1.3f, 2.9f};
  Reducer red({&p}, 3, 25.0, Average::predivide);
  red.set_gradient_as_bucket_view(true);
  std::vector<float> buf(4);
  auto prepared = [&] {
    set_grad(p, g);
    red.prepare_bucket(0, buf.data());
    return buf;
  };
  std::vector<float> mul(4), div(4);
  for (size_t i = 0; i < 4; ++i) {
    mul[i] = g[i] * static_cast<float>(1.0 / 3.0);
    div[i] = g[i] / 3.0f;
  }
  ASSERT_NE(mul, div);  // the test needs values where the two roundings differ
  EXPECT_EQ(prepared(), mul);
  EXPECT_FALSE(red.aliased(0));
  red.finalize_bucket(0, buf.data());
  EXPECT_TRUE(red.aliased(0));
  EXPECT_EQ(prepared(), div);
  red.grads_set_to_none();
  EXPECT_EQ(prepared(), mul);
  Reducer plain({&p}, 3, 25.0, Average::predivide);  // gradient_as_bucket_view=False never divides
  set_grad(p, g);
  plain.prepare_bucket(0, buf.data());
  plain.finalize_bucket(0, buf.data());
  set_grad(p, g);
  plain.prepare_bucket(0, buf.data());
  EXPECT_EQ(buf, mul);
}

TEST(Reducer, UnusedParametersWithFindUnused) {
  // find_unused_parameters: a locally unused parameter's slot is zeros; a globally unused one keeps its
  // .grad (None stays None); without the marking, a missing grad is a logic error.
  Parameter used, unused;
  used.name = "used";
  used.value = Matrix::Zero(2, 1);
  unused.name = "unused";
  unused.value = Matrix::Zero(3, 1);
  set_grad(used, {1.0f, 2.0f});
  Reducer red({&used, &unused}, 2, 25.0, Average::predivide);
  std::vector<float> buf(5, 7.0f);
  EXPECT_THROW(red.prepare_bucket(0, buf.data()), std::logic_error);
  red.set_unused({false, true}, {false, true});
  red.prepare_bucket(0, buf.data());
  EXPECT_EQ(buf, (std::vector<float>{0.5f, 1.0f, 0.0f, 0.0f, 0.0f}));
  red.finalize_bucket(0, buf.data());
  EXPECT_FALSE(unused.has_grad);
  red.set_unused({false, true}, {false, false});  // used on another rank: the grad comes from the bucket
  buf = {0.5f, 1.0f, 4.0f, 5.0f, 6.0f};
  red.finalize_bucket(0, buf.data());
  ASSERT_TRUE(unused.has_grad);
  EXPECT_EQ(unused.grad(2, 0), 6.0f);
}

}  // namespace
}  // namespace ddplab::ddp
