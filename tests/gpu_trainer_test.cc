// The GPU path. Our machines have no GPU: the GPU tests skip with CUDA's own reason, and run where a GPU
// exists: the GPU reference kernels equal the CPU reference kernels bit for bit, the device-resident
// trainer equals the host trainer bit for bit, and the NCCL verifier with --kernels reference and 2 ranks
// (an order-free all-reduce) equals the simulator exactly. The checks that need no GPU run everywhere.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <utility>

#include "src/comm/local_group.h"
#include "src/ddp/trainer.h"
#include "src/tensor/kernels.h"
#include "src/nccl/gpu_trainer.h"
#include "src/nccl/nccl_backend.h"
#include "src/store/open_store.h"
#include "src/store/store.h"
#include "src/data/torch_rng.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

std::string gpu_missing(int n) { return dist::nccl_unavailable_reason(0, n); }

TEST(Gpu, ReferenceKernelsEqualTheCpuOnesBitForBit) {
  if (std::string why = gpu_missing(1); !why.empty()) GTEST_SKIP() << why;
  Generator g(5);
  const int64_t B = 13, in = 70, out = 9;
  const auto x = g.randn(B * in), w = g.randn(out * in), bias = g.randn(out), gy = g.randn(B * out);
  const LinearKernels& cpu = cpu_kernels(Kernels::reference);
  const LinearKernels& gpu = dist::nccl_kernels(Kernels::reference);
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
  if (std::string why = gpu_missing(1); !why.empty()) GTEST_SKIP() << why;
  // --share-gpus: two ranks run on one GPU as well as on two.
  const auto r = testing::run_command({"verify/ddp_verify", "--backend", "nccl", "--share-gpus", "--nproc", "2",
                                       "--kernels", "reference", "--epochs", "2", "--quiet"});
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

// A 1-rank NCCL communicator on GPU 0, meeting itself through a fresh file store.
std::unique_ptr<comm::Communicator> nccl_one_rank() {
  auto store = dist::open_store(dist::parse_store("file:" + testing::temp_dir()), "gpu_trainer_test");
  return dist::connect_nccl(store, 0, 1, 0, std::chrono::seconds(30));
}

ddp::Config small_config(const std::string& optimizer, double momentum) {
  ddp::Config cfg;
  cfg.world_size = 1;
  cfg.layers = {5, 32, 16, 3};
  cfg.relu = true;
  cfg.optimizer = ddp::parse_optimizer(optimizer);
  cfg.momentum = momentum;
  cfg.lr = optimizer == "adam" ? 0.01 : 0.05;
  cfg.samples = 40;
  cfg.batch_size = 6;  // 7 batches, the last of 4: a short batch, and no_sync ends on an odd batch
  cfg.no_sync = 2;
  cfg.epochs = 2;
  cfg.kernels = Kernels::reference;
  return cfg;
}

std::vector<float> flat_params(const ddp::RankResult& r) {
  std::vector<float> out;
  for (const Parameter* p : std::as_const(r.replica->model).parameters()) {
    out.insert(out.end(), p->data(), p->data() + p->numel());
  }
  return out;
}

TEST(Gpu, DeviceTrainerWithReferenceKernelsEqualsTheHostTrainerBitForBit) {
  if (std::string why = gpu_missing(1); !why.empty()) GTEST_SKIP() << why;
  auto nccl = nccl_one_rank();
  struct Case {
    std::string label, optimizer;
    double momentum;
    ddp::Average average;
  };
  for (const Case& c : {Case{"sgd momentum 0.9", "sgd", 0.9, ddp::Average::predivide},
                        Case{"adam", "adam", 0.0, ddp::Average::predivide},
                        Case{"sgd, --average avg (ncclAvg)", "sgd", 0.0, ddp::Average::avg},
                        Case{"sgd, --average postdivide", "sgd", 0.0, ddp::Average::postdivide}}) {
    ddp::Config cfg = small_config(c.optimizer, c.momentum);
    cfg.average = c.average;
    comm::LocalGroup group(1, collective::Algorithm::ring);
    const auto host_comm = group.communicator(0);
    const ddp::RankResult host = ddp::train_rank(cfg, *host_comm);
    const ddp::RankResult dev = dist::train_rank_on_device(cfg, *nccl, Kernels::reference);
    const testing::Match m = testing::match("device vs host trainer, " + c.label, flat_params(dev), flat_params(host));
    EXPECT_EQ(m.equal, m.total) << c.label;
    EXPECT_EQ(dev.sampler_indices, host.sampler_indices) << c.label;
    EXPECT_EQ(dev.optimizer_steps, host.optimizer_steps) << c.label;
    ASSERT_EQ(dev.log.size(), host.log.size()) << c.label;
    for (size_t i = 0; i < host.log.size(); ++i) {
      EXPECT_EQ(dev.log[i].batch_size, host.log[i].batch_size) << c.label << " batch " << i;
      EXPECT_EQ(dev.log[i].epoch, host.log[i].epoch) << c.label << " batch " << i;
      // The logged loss is a device sum in another order than PyTorch's cascade: close, not bitwise.
      EXPECT_NEAR(dev.log[i].loss, host.log[i].loss, 1e-5 * std::abs(host.log[i].loss) + 1e-7)
          << c.label << " batch " << i;
    }
    EXPECT_GT(dev.train_seconds, 0.0) << c.label;
  }
}

TEST(Gpu, DeviceTrainerWithCublasIsCloseToTheHost) {
  if (std::string why = gpu_missing(1); !why.empty()) GTEST_SKIP() << why;
  auto nccl = nccl_one_rank();
  ddp::Config cfg = small_config("sgd", 0.9);
  cfg.kernels = Kernels::fast;
  comm::LocalGroup group(1, collective::Algorithm::ring);
  const auto host_comm = group.communicator(0);
  const ddp::RankResult host = ddp::train_rank(cfg, *host_comm);
  const ddp::RankResult dev = dist::train_rank_on_device(cfg, *nccl, Kernels::fast);
  const testing::Match m =
      testing::match("device (cuBLAS) vs host (OpenBLAS)", flat_params(dev), flat_params(host), 1e-4, 1e-6);
  EXPECT_TRUE(m.allclose) << "maxdiff " << m.maxdiff;
}

TEST(Gpu, NcclVerifierPrintsTheGpuTimingLine) {
  if (std::string why = gpu_missing(1); !why.empty()) GTEST_SKIP() << why;
  const auto r =
      testing::run_command({"verify/ddp_verify", "--backend", "nccl", "--nproc", "1", "--kernels", "reference",
                            "--epochs", "2", "--no-sync", "2", "--optimizer", "adam", "--compute", "device", "--quiet"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("timing: real training "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" ms (GPU, nccl), simulator "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("exact: False"), std::string::npos) << r.out;
}

// No GPU needed from here on.
TEST(GpuTrainer, SupportsMseWithSgdAndAdamOnly) {
  ddp::Config cfg;
  EXPECT_EQ(dist::gpu_trainer_unsupported(cfg), "");
  cfg.optimizer = ddp::OptimizerKind::adam;
  EXPECT_EQ(dist::gpu_trainer_unsupported(cfg), "");
  cfg.loss = ddp::LossKind::ce;
  EXPECT_EQ(dist::gpu_trainer_unsupported(cfg),
            "--compute device keeps the model on the GPU for --loss mse only (got ce); --compute host (the default) "
            "runs every loss on NCCL");
  cfg.loss = ddp::LossKind::ce_probs;
  EXPECT_NE(dist::gpu_trainer_unsupported(cfg).find("(got ce-probs)"), std::string::npos);
  // The refusal comes from the device graph (src/device/graph.h): the first layer it has no node for.
  cfg.model = "cnn";
  cfg.dataset = ddp::DatasetKind::digits;
  EXPECT_EQ(dist::gpu_trainer_unsupported(cfg),
            "--compute device keeps the model on the GPU for Linear and ReLU layers only (got layer \"0\": Conv2d(1, "
            "8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))); --compute host (the default) runs every model on "
            "NCCL");
  cfg.dataset = ddp::DatasetKind::random;
  cfg.layers = {6, 2};
  cfg.model = "linear(6,32),relu,linear(32,2)";  // a spec of Linear and ReLU runs on the device
  cfg.loss = ddp::LossKind::mse;
  EXPECT_EQ(dist::gpu_trainer_unsupported(cfg), "");
}

TEST(GpuTrainer, DdpVerifyRefusesCrossEntropyOnTheDeviceBeforeStartingRanks) {
  // Exit 2 (bad input) with the reason, even where no GPU exists (which would otherwise be exit 3).
  const auto r = testing::run_command(
      {"verify/ddp_verify", "--backend", "nccl", "--compute", "device", "--nproc", "2", "--loss", "ce"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--compute device keeps the model on the GPU for --loss mse only (got ce)"), std::string::npos)
      << r.err;
  const auto gloo = testing::run_command({"verify/ddp_verify", "--backend", "gloo", "--compute", "device", "--nproc", "2"});
  EXPECT_EQ(gloo.status, 2) << gloo.err;
  EXPECT_NE(gloo.err.find("--compute device needs --backend nccl"), std::string::npos) << gloo.err;
}

TEST(GpuTrainer, GlooVerifierPrintsTheCpuTimingLine) {
  const auto r = testing::run_command({"verify/ddp_verify", "--backend", "gloo", "--nproc", "2", "--quiet"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("timing: real training "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" ms (CPU, gloo), simulator "), std::string::npos) << r.out;
}

// cuBLAS is opened only when --kernels fast runs on a GPU: linked, its libcublasLt ran ~0.7 s of static
// initialisers at every start of ddp_verify and of each of its ranks, GPU or not (measured with perf).
TEST(GpuTrainer, DdpVerifyStartsWithoutLoadingCublas) {
  const auto r = testing::run_command({"/usr/bin/env", "LD_DEBUG=files", "verify/ddp_verify", "--help"});
  EXPECT_EQ(r.status, 0) << r.err;
  const bool cuda_linked = r.err.find("libcudart.so") != std::string::npos;  // absent in the build without CUDA
  std::cout << "ddp_verify --help: libcudart " << (cuda_linked ? "loaded" : "not linked (no CUDA)") << "\n";
  EXPECT_EQ(r.err.find("libcublas"), std::string::npos) << "cuBLAS loaded at start-up";
}

}  // namespace
}  // namespace ddplab
