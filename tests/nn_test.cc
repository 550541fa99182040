// Linear initialisation (bit-exact) and MLP forward/backward with MSE and cross-entropy (allclose)
// against torch 1.13 (tests/golden/linear_init.json, mlp_grads.json).
#include "src/model/linear.h"

#include <gtest/gtest.h>

#include "src/train/loss.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::floats;
using testing::load_json;
using testing::match;

std::vector<float> values(const Parameter& p) { return {p.data(), p.data() + p.numel()}; }

Matrix matrix(const std::vector<float>& v, int64_t rows, int64_t cols) {
  Matrix m(rows, cols);
  std::copy(v.begin(), v.end(), m.data());
  return m;
}

TEST(Linear, ResetParametersIsBitExact) {
  const auto g = load_json("tests/golden/linear_init.json");
  for (const auto& c : g["cases"]) {
    manual_seed(c["seed"]);
    Linear lin(c["in"], c["out"], "l");
    const std::string label = "Linear(" + c["in"].dump() + ", " + c["out"].dump() + ") seed " + c["seed"].dump();
    const auto w = match(label + " weight", values(lin.weight), floats(c["weight"]));
    const auto b = match(label + " bias", values(lin.bias), floats(c["bias"]));
    EXPECT_EQ(w.equal, w.total);
    EXPECT_EQ(b.equal, b.total);
  }
}

TEST(Linear, NotebookMlpDrawsInOrder) {
  const auto g = load_json("tests/golden/linear_init.json")["mlp_6_4_2"];
  manual_seed(g["seed"]);
  MLP mlp({6, 4, 2}, false, {"hidden_layer", "output_layer"});
  const auto ps = mlp.parameters();
  ASSERT_EQ(ps.size(), 4u);
  EXPECT_EQ(ps[0]->name, "hidden_layer.weight");
  EXPECT_EQ(ps[3]->name, "output_layer.bias");
  for (size_t i = 0; i < 4; ++i) {
    const auto m = match("notebook MLP " + ps[i]->name, values(*ps[i]), floats(g["params"][i]));
    EXPECT_EQ(m.equal, m.total);
  }
}

TEST(MLP, ForwardBackwardMatchPyTorch) {
  const auto g = load_json("tests/golden/mlp_grads.json");
  for (const auto& c : g["cases"]) {
    const auto sizes = c["sizes"].get<std::vector<int64_t>>();
    const bool relu = c["relu"];
    const int64_t batch = c["batch"];
    MLP mlp(sizes, relu, MLP::sequential_names(sizes.size() - 1, relu));
    auto ps = mlp.parameters();
    for (size_t i = 0; i < ps.size(); ++i) {  // load PyTorch's parameters, then compare the math only
      const auto v = floats(c["params"][i]);
      std::copy(v.begin(), v.end(), ps[i]->data());
    }
    const Matrix x = matrix(floats(c["x"]), batch, sizes.front());
    const Matrix out = mlp.forward(x);
    const std::string label = "MLP " + c["sizes"].dump() + " " + c["loss_fn"].get<std::string>();
    // BLAS sums the products in another order: outputs near zero need an absolute tolerance.
    EXPECT_TRUE(
        match(label + " forward", {out.data(), out.data() + out.size()}, floats(c["out"]), 1e-5, 1e-6).allclose);
    LossResult l = c["loss_fn"] == "mse" ? mse_loss(out, matrix(floats(c["y"]), batch, sizes.back()))
                                         : cross_entropy(out, c["labels"].get<std::vector<int64_t>>());
    EXPECT_NEAR(l.loss, c["loss"].get<double>(), 1e-6 * std::max(1.0, std::abs(c["loss"].get<double>())));
    mlp.zero_grad();
    mlp.backward(l.grad);
    for (size_t i = 0; i < ps.size(); ++i) {
      ASSERT_TRUE(ps[i]->has_grad);
      const auto m = match(label + " grad " + ps[i]->name, {ps[i]->grad.data(), ps[i]->grad.data() + ps[i]->numel()},
                           floats(c["grads"][i]), 1e-4, 1e-6);
      EXPECT_TRUE(m.allclose) << ps[i]->name;
    }
  }
}

TEST(MLP, SequentialNamesFollowNnSequential) {
  EXPECT_EQ(MLP::sequential_names(3, true), (std::vector<std::string>{"layers.0", "layers.2", "layers.4"}));
  EXPECT_EQ(MLP::sequential_names(2, false), (std::vector<std::string>{"layers.0", "layers.1"}));
}

TEST(MLP, BackwardAccumulatesUntilZeroGrad) {
  manual_seed(3);
  MLP mlp({3, 2}, false, {"l"});
  Matrix x = Matrix::Ones(2, 3);
  Matrix g = Matrix::Ones(2, 2);
  mlp.forward(x);
  mlp.backward(g);
  const Matrix once = mlp.linears[0].weight.grad;
  mlp.forward(x);
  mlp.backward(g);
  EXPECT_TRUE(mlp.linears[0].weight.grad.isApprox(2 * once));
  mlp.zero_grad(/*set_to_none=*/true);
  EXPECT_FALSE(mlp.linears[0].weight.has_grad);
  mlp.forward(x);
  mlp.backward(g);
  mlp.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(mlp.linears[0].weight.has_grad);
  EXPECT_EQ(mlp.linears[0].weight.grad.cwiseAbs().maxCoeff(), 0.0f);
}

}  // namespace
}  // namespace ddplab
