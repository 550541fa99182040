// The GPU path. Our machines have no GPU: every test here skips with CUDA's own reason, and runs where a
// GPU exists: the GPU reference kernels equal the CPU reference kernels bit for bit, and the NCCL
// verifier with --kernels reference and 2 ranks (an order-free all-reduce) equals the simulator exactly.
#include <gtest/gtest.h>

#include "src/kernels.h"
#include "src/torch_rng.h"
#include "tests/testing.h"
#include "verify/nccl_backend.h"

namespace ddplab {
namespace {

std::string gpu_missing(int n) { return verify::nccl_unavailable_reason(0, n); }

TEST(Gpu, ReferenceKernelsEqualTheCpuOnesBitForBit) {
  if (std::string why = gpu_missing(1); !why.empty()) GTEST_SKIP() << why;
  Generator g(5);
  const int64_t B = 13, in = 70, out = 9;
  const auto x = g.randn(B * in), w = g.randn(out * in), bias = g.randn(out), gy = g.randn(B * out);
  const LinearKernels& cpu = cpu_kernels(Kernels::reference);
  const LinearKernels& gpu = verify::nccl_kernels(Kernels::reference);
  std::vector<float> a(B * out), b(B * out), gxa(B * in), gxb(B * in), gwa(out * in), gwb(out * in), gba(out), gbb(out);
  cpu.forward(x.data(), w.data(), bias.data(), a.data(), B, in, out);
  gpu.forward(x.data(), w.data(), bias.data(), b.data(), B, in, out);
  cpu.grad_input(gy.data(), w.data(), gxa.data(), B, in, out);
  gpu.grad_input(gy.data(), w.data(), gxb.data(), B, in, out);
  cpu.grad_weight(gy.data(), x.data(), gwa.data(), B, in, out);
  gpu.grad_weight(gy.data(), x.data(), gwb.data(), B, in, out);
  cpu.grad_bias(gy.data(), gba.data(), B, out);
  gpu.grad_bias(gy.data(), gbb.data(), B, out);
  EXPECT_EQ(a, b);
  EXPECT_EQ(gxa, gxb);
  EXPECT_EQ(gwa, gwb);
  EXPECT_EQ(gba, gbb);
}

TEST(Gpu, NcclVerifierWithReferenceKernelsIsExact) {
  if (std::string why = gpu_missing(2); !why.empty()) GTEST_SKIP() << why;
  const auto r = testing::run_command({"verify/ddp_verify", "--backend", "nccl", "--nproc", "2", "--kernels",
                                       "reference", "--epochs", "2", "--quiet"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("exact: False"), std::string::npos) << r.out;
}

TEST(Gpu, NoGpuMeansExit3WithTheReason) {
  const std::string why = gpu_missing(2);
  if (why.empty()) GTEST_SKIP() << "this machine has GPUs: the no-GPU message cannot be seen here";
  const auto r = testing::run_command({"verify/ddp_verify", "--backend", "nccl", "--nproc", "2"});
  EXPECT_EQ(r.status, 3);
  EXPECT_NE(r.err.find("NCCL backend needs 2 CUDA devices"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ddplab
