// tensor.sum(0) in PyTorch's cascade order (src/tensor/torch_sum.h) against torch itself, bit for bit, over row
// and column counts that take every branch of SumKernel.cpp: the golden (tests/golden/column_sums.json, AVX2's
// 8-lane kernels), and live torch under each kernel family this processor runs (AVX2; AVX512 where it has it).
#include "src/tensor/torch_sum.h"

#include <gtest/gtest.h>

#include "src/data/torch_rng.h"
#include "src/tensor/cpu_capability.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

// Every case's sums against ours with `lanes` (0: the family torch picks here); how many floats were bitwise
// equal, of how many. `expect`: each case must be equal.
std::pair<int64_t, int64_t> compare_cases(const nlohmann::json& cases, int64_t lanes, bool expect = true) {
  Generator gen(31);  // the inputs are torch.randn(rows, cols) from one generator, in this order
  int64_t exact = 0, total = 0;
  for (const auto& c : cases) {
    const int64_t rows = c["rows"], cols = c["cols"];
    const std::vector<float> x = gen.randn(rows * cols);
    std::vector<float> got(static_cast<size_t>(cols));
    torch_sum_dim0(x.data(), got.data(), rows, cols, lanes);
    const auto want = testing::floats(c["sum0"]);
    for (size_t k = 0; k < want.size(); ++k) exact += got[k] == want[k];
    total += static_cast<int64_t>(want.size());
    if (expect) {
      EXPECT_EQ(got, want) << rows << " x " << cols << " with " << lanes << " lanes";
    }
  }
  return {exact, total};
}

TEST(TorchSum, ColumnSumsAreBitExact) {
  const auto g = testing::load_json("tests/golden/column_sums.json");
  Generator gen(31);  // the inputs are torch.randn(rows, cols) from one generator, in this order
  int64_t exact = 0, total = 0, sequential_exact = 0;
  for (const auto& c : g["cases"]) {
    const int64_t rows = c["rows"], cols = c["cols"];
    const std::vector<float> x = gen.randn(rows * cols);
    std::vector<float> got(static_cast<size_t>(cols)), seq(static_cast<size_t>(cols), 0.0f);
    torch_sum_dim0(x.data(), got.data(), rows, cols, 8);  // the golden was made under AVX2
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

// torch's kernels are chosen by the processor: live torch under each family this one runs, against ours with
// that family's lanes; and the family ddplab picks by default is the one torch 1.13 picks here.
TEST(TorchSum, LiveTorchUnderEachKernelFamily) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: live sums not run";
  const std::string out = testing::temp_dir() + "/sums.json";
  const auto run = [&](const std::string& capability) {
    std::vector<std::string> cmd = {"/usr/bin/env"};
    if (!capability.empty()) cmd.push_back("ATEN_CPU_CAPABILITY=" + capability);
    cmd.insert(cmd.end(), {"/usr/bin/python3", "tests/torch_sum_live.py", out});
    const testing::CommandResult r = testing::run_command(cmd);
    EXPECT_EQ(r.status, 0) << r.err;
    return testing::load_json(out);
  };
  const auto chosen = run("");
  EXPECT_EQ(chosen["capability"].get<std::string>(), capability_name(torch_cpu_capability()))
      << "torch 1.13 picks other kernels here than ddplab's cpu_capability.cc says";
  const auto [exact, total] = compare_cases(chosen["cases"], 0);
  std::printf("sum(0) under torch's own choice (%s): %lld/%lld bitwise equal\n",
              capability_name(torch_cpu_capability()).c_str(), static_cast<long long>(exact),
              static_cast<long long>(total));
  const auto avx2 = run("avx2");
  ASSERT_EQ(avx2["capability"], "AVX2");
  compare_cases(avx2["cases"], 8);
  if (!cpu_has_avx512()) GTEST_SKIP() << "this processor has no AVX-512: torch's 16-lane sums not run";
  const auto avx512 = run("avx512");
  ASSERT_EQ(avx512["capability"], "AVX512");
  const auto [e16, t16] = compare_cases(avx512["cases"], 16);
  const auto [e8, t8] = compare_cases(avx512["cases"], 8, false);
  std::printf("sum(0) under AVX512: %lld/%lld bitwise equal with 16 lanes (with AVX2's 8: %lld/%lld)\n",
              static_cast<long long>(e16), static_cast<long long>(t16), static_cast<long long>(e8),
              static_cast<long long>(t8));
  EXPECT_LT(e8, t8) << "the 16-lane order must make a difference somewhere, or this test shows nothing";
}

}  // namespace
}  // namespace ddplab
