// SGD updates against torch.optim.SGD on fixed parameters and gradients: bitwise (tests/golden/sgd.json).
#include "src/optim.h"

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::floats;

TEST(SGD, UpdatesAreBitExactWithPyTorch) {
  const auto g = testing::load_json("tests/golden/sgd.json");
  for (const auto& c : g["cases"]) {
    const auto& o = c["options"];
    SGDOptions opts;
    opts.lr = o["lr"];
    opts.momentum = o.value("momentum", 0.0);
    opts.dampening = o.value("dampening", 0.0);
    opts.weight_decay = o.value("weight_decay", 0.0);
    opts.nesterov = o.value("nesterov", false);
    Parameter p;
    p.name = "p";
    const auto init = floats(c["param"]);
    p.shape = {static_cast<int64_t>(init.size())};
    p.value.resize(static_cast<Eigen::Index>(init.size()), 1);
    std::copy(init.begin(), init.end(), p.data());
    SGD opt({&p}, opts);
    for (size_t step = 0; step < c["grads"].size(); ++step) {
      const auto grad = floats(c["grads"][step]);
      Matrix gm(static_cast<Eigen::Index>(grad.size()), 1);
      std::copy(grad.begin(), grad.end(), gm.data());
      opt.zero_grad();
      p.accumulate_grad(gm);
      opt.step();
      const auto m = testing::match("SGD " + o.dump() + " step " + std::to_string(step + 1),
                                    {p.data(), p.data() + p.numel()}, floats(c["after_each_step"][step]));
      EXPECT_EQ(m.equal, m.total);
    }
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
