// The CUDA toolchain builds and links here; the kernel runs only where a GPU exists (never on this
// project's machines), otherwise the test is skipped with CUDA's own reason.
#include <nccl.h>

#include <gtest/gtest.h>

#include "tests/toolchain/add_one.h"

TEST(CudaToolchain, NcclLinks) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_GE(version, 21000) << "ncclAvg needs NCCL >= 2.10";
}

TEST(CudaToolchain, KernelAddsOne) {
  std::vector<float> x = {1.0f, 2.5f, -3.0f};
  const std::string err = add_one_on_gpu(x);
  if (!err.empty()) GTEST_SKIP() << "no usable GPU: " << err;
  EXPECT_EQ(x, (std::vector<float>{2.0f, 3.5f, -2.0f}));
}
