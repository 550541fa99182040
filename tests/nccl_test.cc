// The real-NCCL verifier on one GPU: many ranks sharing it (--share-gpus), NCCL pinned to the order the
// simulator reproduces (--nccl-exact, exact at world sizes 2-8), and faults that end in time with the
// rank named. Every test but the last needs a GPU and skips elsewhere with CUDA's own reason.
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "src/nccl/nccl_backend.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::CommandResult;
const std::string kVerify = "verify/ddp_verify";

std::string no_gpu() { return dist::nccl_unavailable_reason(0, 1, true); }

CommandResult verify(std::vector<std::string> args) {
  args.insert(args.begin(), kVerify);
  return testing::run_command(args);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Nccl, ManyRanksOnOneGpuMatchTheNcclRingExactly) {
  if (std::string why = no_gpu(); !why.empty()) GTEST_SKIP() << why;
  // A small model (every bucket far below one NCCL chunk) and one whose 9 MiB weight spans many chunks.
  const std::vector<std::vector<std::string>> cases = {
      {"--epochs", "2", "--momentum", "0.9"},
      {"--layers", "32,1536,1536,10", "--samples", "16", "--batch-size", "2", "--lr", "0.05"},
  };
  for (int ws = 2; ws <= 8; ++ws) {
    for (const auto& c : cases) {
      std::vector<std::string> args = {"--backend", "nccl",    "--share-gpus",     "--nccl-exact", "--kernels",
                                       "reference", "--nproc", std::to_string(ws), "--quiet"};
      args.insert(args.end(), c.begin(), c.end());
      const CommandResult r = verify(args);
      std::string label = "ws=" + std::to_string(ws);
      for (const auto& a : c) label += " " + a;
      EXPECT_EQ(r.status, 0) << label << "\n" << r.out << r.err;
      EXPECT_EQ(r.out.find("exact: False"), std::string::npos) << label << "\n" << r.out;
      EXPECT_NE(r.out.find("--share-gpus"), std::string::npos) << "the transport note is missing\n" << r.out;
      std::printf("%-60s sim (nccl-ring) vs real NCCL: %s\n", label.c_str(),
                  r.status == 0 && r.out.find("exact: False") == std::string::npos ? "all exact" : "DIFFER");
    }
  }
}

TEST(Nccl, ARankThatExitsIsNamedWithinTheTimeout) {
  if (std::string why = no_gpu(); !why.empty()) GTEST_SKIP() << why;
  const auto t0 = std::chrono::steady_clock::now();
  const CommandResult r = verify({"--backend", "nccl", "--share-gpus", "--nproc", "3", "--fault", "exit",
                                  "--fault-rank", "1", "--fault-at", "2", "--timeout", "5", "--quiet"});
  const double s = seconds_since(t0);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("rank 1 exited or hangs"), std::string::npos) << r.err;
  EXPECT_LT(s, 5 + 2 + 8) << "timeout + 2 s for the survivors, plus NCCL init and start-up\n" << r.err;
}

TEST(Nccl, ARankThatHangsIsNamedWithinTheTimeout) {
  if (std::string why = no_gpu(); !why.empty()) GTEST_SKIP() << why;
  const auto t0 = std::chrono::steady_clock::now();
  const CommandResult r = verify({"--backend", "nccl", "--share-gpus", "--nproc", "3", "--fault", "hang",
                                  "--fault-rank", "2", "--fault-at", "3", "--timeout", "3", "--quiet"});
  const double s = seconds_since(t0);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("rank 2 exited or hangs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("failed after at most 3000 ms"), std::string::npos) << r.err;
  EXPECT_LT(s, 3 + 2 + 8 + 5) << "timeout + 2 s, start-up, and the launcher's SIGKILL of the hung rank\n" << r.err;
}

TEST(Nccl, WithoutALauncherTheSurvivorNamesTheDeadPeer) {
  // torchrun-style ranks: nobody else will say what happened, the survivor must.
  if (std::string why = no_gpu(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = testing::temp_dir();
  const auto rank_cmd = [&](int r, std::vector<std::string> extra) {
    std::vector<std::string> cmd = {"/usr/bin/env",
                                    "RANK=" + std::to_string(r),
                                    "WORLD_SIZE=2",
                                    "LOCAL_RANK=" + std::to_string(r),
                                    "LOCAL_WORLD_SIZE=2",
                                    kVerify,
                                    "--backend",
                                    "nccl",
                                    "--share-gpus",
                                    "--store",
                                    "file:" + dir,
                                    "--timeout",
                                    "4",
                                    "--quiet"};
    cmd.insert(cmd.end(), extra.begin(), extra.end());
    return cmd;
  };
  CommandResult r1;
  std::thread t([&] {
    r1 = testing::run_command(rank_cmd(1, {"--fault", "exit", "--fault-rank", "1", "--fault-at", "1"}));
  });
  const auto t0 = std::chrono::steady_clock::now();
  const CommandResult r0 = testing::run_command(rank_cmd(0, {}));
  const double s = seconds_since(t0);
  t.join();
  EXPECT_EQ(r1.status, 1) << r1.err;
  EXPECT_EQ(r0.status, 1) << r0.err;
  EXPECT_NE(r0.err.find("rank 1 exited or hangs"), std::string::npos) << r0.err;
  EXPECT_LT(s, 4 + 2 + 8) << r0.err;
}

TEST(Nccl, InitWithAMissingPeerEndsAtTheTimeout) {
  if (std::string why = no_gpu(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = testing::temp_dir();
  const auto t0 = std::chrono::steady_clock::now();
  const CommandResult r =
      testing::run_command({"/usr/bin/env", "RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2", kVerify,
                            "--backend", "nccl", "--share-gpus", "--store", "file:" + dir, "--timeout", "3"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("NCCL init of 2 ranks did not finish within 3000 ms"), std::string::npos) << r.err;
  EXPECT_LT(seconds_since(t0), 3 + 2 + 5) << r.err;
}

TEST(Nccl, NoGpuMeansExit3WithTheReasonEvenWhenSharing) {
  if (no_gpu().empty()) GTEST_SKIP() << "this machine has a GPU: the no-GPU message cannot be seen here";
  const CommandResult r = verify({"--backend", "nccl", "--share-gpus", "--nproc", "4"});
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_NE(r.err.find("NCCL backend needs 1 CUDA device"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ddplab
