// SGD and Adam updates against torch.optim on fixed parameters and gradients: bitwise
// (tests/golden/sgd.json, adam.json).
#include "src/optim.h"

#include <gtest/gtest.h>

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

TEST(SGD, SkipsParametersWithoutGrad) {
  Parameter p;
  p.value = Matrix::Constant(2, 1, 1.5f);
  SGD opt({&p}, SGDOptions{0.1});
  opt.step();
  EXPECT_EQ(p.value(0, 0), 1.5f);
}

}  // namespace
}  // namespace ddplab
