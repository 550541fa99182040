// tensor.sum(0) in PyTorch's cascade order (src/tensor/torch_sum.h) against torch itself, bit for bit, over row
// and column counts that take every branch of SumKernel.cpp (tests/golden/column_sums.json).
#include "src/tensor/torch_sum.h"

#include <gtest/gtest.h>

#include "src/data/torch_rng.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

TEST(TorchSum, ColumnSumsAreBitExact) {
  const auto g = testing::load_json("tests/golden/column_sums.json");
  Generator gen(31);  // the inputs are torch.randn(rows, cols) from one generator, in this order
  int64_t exact = 0, total = 0, sequential_exact = 0;
  for (const auto& c : g["cases"]) {
    const int64_t rows = c["rows"], cols = c["cols"];
    const std::vector<float> x = gen.randn(rows * cols);
    std::vector<float> got(static_cast<size_t>(cols)), seq(static_cast<size_t>(cols), 0.0f);
    torch_sum_dim0(x.data(), got.data(), rows, cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) seq[k] = seq[k] + x[r * cols + k];
    }
    const auto want = testing::floats(c["sum0"]);
    for (size_t k = 0; k < want.size(); ++k) {
      exact += got[k] == want[k];
      sequential_exact += seq[k] == want[k];
      ++total;
    }
    EXPECT_EQ(got, want) << rows << " x " << cols;
  }
  std::printf("sum(0): %lld/%lld bitwise equal to torch (a plain running sum: %lld/%lld)\n",
              static_cast<long long>(exact), static_cast<long long>(total), static_cast<long long>(sequential_exact),
              static_cast<long long>(total));
}

}  // namespace
}  // namespace ddplab
