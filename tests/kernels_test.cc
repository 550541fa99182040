// The Linear kernel tables: reference kernels add in the documented order (inputs where order changes the
// answer), and both tables compute the same mathematics (allclose on ordinary data).
#include "src/tensor/kernels.h"

#include <gtest/gtest.h>

#include "src/data/torch_rng.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

TEST(ReferenceKernels, AddInTheDocumentedOrder) {
  // (((0 + 1e8) + 1) + -1e8) + 1 = 1 in float: 1e8 + 1 rounds back to 1e8. Any other grouping of these
  // four products gives 0 or 2.
  const float x[4] = {1e8f, 1.0f, -1e8f, 1.0f};
  const float w[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  const float bias[1] = {0.5f};
  float y[1];
  const LinearKernels& ref = cpu_kernels(Kernels::reference);
  ref.forward(x, w, bias, y, 1, 4, 1);
  EXPECT_EQ(y[0], 1.5f);
  float gx[4];  // gx[0,i] = gy[0,0] * W[0,i]: one product, exact
  const float gy[1] = {2.0f};
  ref.grad_input(gy, w, gx, 1, 4, 1);
  EXPECT_EQ(gx[3], 2.0f);
  // gW[0,0] = sum over the batch in row order: rows (1e8, 1, -1e8, 1) -> 1.
  const float gy4[4] = {1e8f, 1.0f, -1e8f, 1.0f}, x4[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  float gw[1], gb[1];
  ref.grad_weight(gy4, x4, gw, 4, 1, 1);
  ref.grad_bias(gy4, gb, 4, 1);
  EXPECT_EQ(gw[0], 1.0f);
  EXPECT_EQ(gb[0], 1.0f);
}

TEST(Kernels, FastAndReferenceAgreeToRounding) {
  Generator g(3);
  const int64_t B = 16, in = 37, out = 11;
  const auto x = g.randn(B * in), w = g.randn(out * in), bias = g.randn(out), gy = g.randn(B * out);
  std::vector<float> y[2], gx[2], gw[2], gb[2];
  for (int k = 0; k < 2; ++k) {
    const LinearKernels& t = cpu_kernels(k == 0 ? Kernels::fast : Kernels::reference);
    y[k].resize(B * out), gx[k].resize(B * in), gw[k].resize(out * in), gb[k].resize(out);
    t.forward(x.data(), w.data(), bias.data(), y[k].data(), B, in, out);
    t.grad_input(gy.data(), w.data(), gx[k].data(), B, in, out);
    t.grad_weight(gy.data(), x.data(), gw[k].data(), B, in, out);
    t.grad_bias(gy.data(), gb[k].data(), B, out);
  }
  EXPECT_TRUE(testing::match("forward fast vs reference", y[0], y[1], 1e-5, 1e-5).allclose);
  EXPECT_TRUE(testing::match("grad_input fast vs reference", gx[0], gx[1], 1e-5, 1e-5).allclose);
  EXPECT_TRUE(testing::match("grad_weight fast vs reference", gw[0], gw[1], 1e-5, 1e-5).allclose);
  EXPECT_TRUE(testing::match("grad_bias fast vs reference", gb[0], gb[1], 1e-5, 1e-5).allclose);
}

}  // namespace
}  // namespace ddplab
