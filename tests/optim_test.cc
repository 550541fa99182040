// SGD, Adam and AdamW updates against torch.optim on fixed parameters and gradients: bitwise
// (tests/golden/sgd.json, adam.json, gpt_train/adamw.json).
#include "src/train/optim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "src/base/errors.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::floats;

// Replays a golden case: the same starting parameter and gradients, one step per gradient, and after each
// step the parameter must have exactly PyTorch's bits.
template <typename MakeOptimizer>
void replay(const std::string& name, const testing::json& c, MakeOptimizer make) {
  const auto& o = c["options"];
  Parameter p;
  p.name = "p";
  const auto init = floats(c["param"]);
  p.shape = {static_cast<int64_t>(init.size())};
  p.value.resize(static_cast<Eigen::Index>(init.size()), 1);
  std::copy(init.begin(), init.end(), p.data());
  auto opt = make(&p, o);
  for (size_t step = 0; step < c["grads"].size(); ++step) {
    const auto grad = floats(c["grads"][step]);
    Matrix gm(static_cast<Eigen::Index>(grad.size()), 1);
    std::copy(grad.begin(), grad.end(), gm.data());
    opt.zero_grad();
    p.accumulate_grad(gm);
    opt.step();
    const auto m = testing::match(name + " " + o.dump() + " step " + std::to_string(step + 1),
                                  {p.data(), p.data() + p.numel()}, floats(c["after_each_step"][step]));
    EXPECT_EQ(m.equal, m.total);
  }
}

TEST(SGD, UpdatesAreBitExactWithPyTorch) {
  const auto golden = testing::load_json("tests/golden/sgd.json");
  for (const auto& c : golden["cases"]) {
    replay("SGD", c, [](Parameter* p, const testing::json& o) {
      SGDOptions opts;
      opts.lr = o["lr"];
      opts.momentum = o.value("momentum", 0.0);
      opts.dampening = o.value("dampening", 0.0);
      opts.weight_decay = o.value("weight_decay", 0.0);
      opts.nesterov = o.value("nesterov", false);
      return SGD({p}, opts);
    });
  }
}

TEST(Adam, UpdatesAreBitExactWithPyTorch) {
  const auto golden = testing::load_json("tests/golden/adam.json");
  for (const auto& c : golden["cases"]) {
    replay("Adam", c, [](Parameter* p, const testing::json& o) {
      AdamOptions opts;
      opts.lr = o["lr"];
      if (o.contains("betas")) {
        opts.beta1 = o["betas"][0];
        opts.beta2 = o["betas"][1];
      }
      opts.eps = o.value("eps", 1e-8);
      opts.weight_decay = o.value("weight_decay", 0.0);
      return Adam({p}, opts);
    });
  }
}

// nanoGPT's AdamW: two groups made by weight_decay_groups, several steps, 'aux.weight' without a grad on
// some steps (skipped: no decay, no step count), one case with a per-group lr. Every parameter after every
// step must have torch's bits.
TEST(AdamW, GroupsAndMissingGradsAreBitExactWithPyTorch) {
  const auto golden = testing::load_json("tests/golden/gpt_train/adamw.json");
  int64_t equal = 0, total = 0, worst_ulps = 0;
  for (const auto& c : golden["cases"]) {
    const auto& o = c["options"];
    std::vector<Parameter> storage(c["shapes"].size());
    std::vector<Parameter*> params;
    for (size_t i = 0; i < storage.size(); ++i) {
      Parameter& p = storage[i];
      p.name = c["shapes"][i][0];
      p.shape = c["shapes"][i][1].get<std::vector<int64_t>>();
      const auto init = floats(c["init"][p.name]);
      p.value.resize(p.shape[0], static_cast<Eigen::Index>(init.size()) / p.shape[0]);
      std::copy(init.begin(), init.end(), p.data());
      params.push_back(&p);
    }
    AdamOptions opts;
    opts.lr = o["lr"];
    opts.beta1 = o["betas"][0];
    opts.beta2 = o["betas"][1];
    opts.eps = o["eps"];
    opts.weight_decay = o["weight_decay"];
    std::vector<AdamParamGroup> groups = weight_decay_groups(params, opts);
    ASSERT_EQ(groups.size(), 2u);
    std::vector<std::string> decay, no_decay;
    for (const Parameter* p : groups[0].params) decay.push_back(p->name);
    for (const Parameter* p : groups[1].params) no_decay.push_back(p->name);
    EXPECT_EQ(decay, c["decay"].get<std::vector<std::string>>());
    EXPECT_EQ(no_decay, c["no_decay"].get<std::vector<std::string>>());
    EXPECT_EQ(groups[1].options.weight_decay, 0.0);
    if (o.contains("no_decay_lr")) groups[1].options.lr = o["no_decay_lr"];
    AdamW opt(groups);
    for (size_t s = 0; s < c["steps"].size(); ++s) {
      const auto& step = c["steps"][s];
      opt.zero_grad(/*set_to_none=*/true);
      for (Parameter& p : storage) {
        if (step["grads"][p.name].is_null()) continue;  // p.grad = None
        const auto g = floats(step["grads"][p.name]);
        Matrix gm(p.value.rows(), p.value.cols());
        std::copy(g.begin(), g.end(), gm.data());
        p.accumulate_grad(gm);
      }
      opt.step();
      for (Parameter& p : storage) {
        const std::vector<float> got(p.data(), p.data() + p.numel());
        const auto want = floats(step["after"][p.name]);
        const auto m =
            testing::match("AdamW lr " + o["lr"].dump() + " step " + std::to_string(s + 1) + " " + p.name, got, want);
        EXPECT_EQ(m.equal, m.total);
        equal += m.equal;
        total += m.total;
        worst_ulps = std::max(worst_ulps, testing::max_ulps(got, want));
      }
    }
  }
  std::printf("AdamW: %lld/%lld parameter values bitwise equal to torch 1.13 after every step, max %lld ulps\n",
              static_cast<long long>(equal), static_cast<long long>(total), static_cast<long long>(worst_ulps));
  EXPECT_GT(total, 0);
}

TEST(AdamW, RefusesAParameterInTwoGroups) {
  Parameter a, b;
  a.name = "a";
  b.name = "b";
  try {
    AdamW opt({{{&a, &b}, AdamOptions{}}, {{&a}, AdamOptions{}}});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    std::printf("UsageError: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("parameter 'a' appears in more than one parameter group"), std::string::npos);
  }
}

TEST(SGD, SkipsParametersWithoutGrad) {
  Parameter p;
  p.value = Matrix::Constant(2, 1, 1.5f);
  SGD opt({&p}, SGDOptions{0.1});
  opt.step();
  EXPECT_EQ(p.value(0, 0), 1.5f);
}

}  // namespace
}  // namespace ddplab
