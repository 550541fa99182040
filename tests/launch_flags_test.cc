// //verify:ddp_verify and the labs as launchers, given flags or an environment they cannot honour: WORLD_SIZE
// from the environment, fault flags, flags that cannot take effect, NCCL without a GPU. Each is refused once,
// in one line, before any rank starts; each test names the cause it guards. (launch_hardening_test: how
// ranks end.)
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/hardening.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using namespace hardening;

// Cause 7: WORLD_SIZE / OMPI_COMM_WORLD_SIZE escaped the 1..64 limit of --nproc (100000 was accepted).
TEST_F(Hardening, WorldSizeFromTheEnvironmentHasTheNprocLimit) {
  const std::string dir = testing::temp_dir();
  // A rendezvous would wait the 60 s timeout: refused in under 30 s means refused before it, load or not.
  const std::vector<std::string> args = {"--store", "file:" + dir, "--samples", "200000", "--batch-size",
                                         "1",       "--timeout",   "60",        "--quiet"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"RANK=0", "WORLD_SIZE=100000"}, "WORLD_SIZE must be in [1, 64] (got 100000)"},
      {{"RANK=0", "WORLD_SIZE=65"}, "WORLD_SIZE must be in [1, 64] (got 65)"},
      {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=100000"},
       "OMPI_COMM_WORLD_SIZE must be in [1, 64] (got 100000)"},
  };
  for (const auto& [env, expect] : cases) {
    const auto t0 = Clock::now();
    const CommandResult r = run(env, kVerify, args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_LT(seconds_since(t0), 30.0) << "refused before any rendezvous";
  }
}

// Cause 10: a fault aimed at a rank the run does not have was refused by every rank (one line each), or,
// within the 0..63 range, silently injected nothing. Now: refused once, before any rank starts.
TEST_F(Hardening, FaultFlagsAreCheckedOnceBeforeRanksStart) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"notebooks_ported/001_toy_ddp/001_toy_ddp", "--fault", "exit", "--fault-rank", "99"},
       "--fault-rank must be in [0, 1] (got 99)"},
      {{kVerify, "--fault", "exit", "--fault-rank", "5"}, "--fault-rank must be in [0, 1] (got 5)"},
      {{kVerify, "--fault-at", "3"}, "--fault-at needs --fault exit|hang"},
  };
  for (const auto& [cmd, expect] : cases) {
    std::vector<std::string> args(cmd.begin() + 1, cmd.end());
    args.insert(args.begin(), {"--backend", "gloo", "--nproc", "2"});
    const CommandResult r = run({}, cmd[0], args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err, cmd[0].substr(cmd[0].rfind('/') + 1) + ": " + expect + "\n");
  }
}

// Issue 19, cause 7: flags that could not take effect were accepted and ignored: --fault on the simulator,
// --threads on real ranks, --fault-at past the run's last all-reduce (the run exited 0, nothing injected).
TEST_F(Hardening, FlagsThatCannotTakeEffectAreRefused) {
  const std::string lab001 = "notebooks_ported/001_toy_ddp/001_toy_ddp";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{lab001, "--fault", "exit"},
       "--fault takes effect only on real ranks (--backend gloo|nccl): the simulator injects no faults"},
      {{lab001, "--backend", "gloo", "--nproc", "2", "--threads", "-1"},
       "--threads takes effect only on the simulator (--backend sim): real ranks do not read it"},
      {{kVerify, "--nproc", "2", "--fault", "exit", "--fault-rank", "1", "--fault-at", "100000", "--quiet"},
       "rank 1: --fault-at 100000 is past this run's last all-reduce (#"},
  };
  for (const auto& [cmd, expect] : cases) {
    SCOPED_TRACE(cmd[0]);
    const CommandResult r = run({}, cmd[0], std::vector<std::string>(cmd.begin() + 1, cmd.end()));
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
  }
}

// Issue 19, "messages a learner meets": without a GPU, --backend nccl said "needs 2 CUDA devices;
// cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version". It says that there is
// no NVIDIA driver or GPU, and that --share-gpus needs only one.
TEST_F(Hardening, NoGpuIsSaidPlainly) {
  const CommandResult r = run({}, kVerify, {"--nproc", "2", "--backend", "nccl"});
  if (r.status == 0) GTEST_SKIP() << "this machine has GPUs for NCCL";
  EXPECT_EQ(r.status, 3) << r.err;
  if (r.err.find("built without CUDA") != std::string::npos) GTEST_SKIP() << "built without CUDA: " << r.err;
  EXPECT_NE(r.err.find("NCCL backend needs 2 CUDA devices, and this machine has none: no NVIDIA driver or GPU here"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("; --share-gpus runs every rank on one GPU"), std::string::npos) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
}

}  // namespace
}  // namespace ddplab
