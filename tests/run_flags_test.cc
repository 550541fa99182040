// The run flags (src/launch/run_flags.h), read once: what read_run_flags gives and refuses, and that every
// program offers the choice lists defined there (and the all-reduce algorithms registered in
// src/collective/allreduce.cc) in the same one-line error, exit 2: ddp_verify, nccl_order, ddp_sim and the labs.
#include "src/launch/run_flags.h"

#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "src/collective/allreduce.h"
#include "src/launch/runner.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

constexpr const char* kVerify = "verify/ddp_verify";
constexpr const char* kNcclOrder = "verify/nccl_order";
constexpr const char* kSim = "sim/ddp_sim";
constexpr const char* kLab001 = "notebooks_ported/001_toy_ddp/001_toy_ddp";
constexpr const char* kLab004 = "notebooks_ported/004_parallelism/004_parallelism";

dist::RunFlags read(std::vector<std::string> args, dist::Backends backends) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const Flags flags(static_cast<int>(argv.size()), argv.data(), dist::runner_flag_names(),
                    dist::with_runner_bare_flags({}));
  return dist::read_run_flags(flags, backends);
}

std::string refusal(std::vector<std::string> args, dist::Backends backends) {
  try {
    read(std::move(args), backends);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

// Runs a program that must refuse its input: one line on stderr, nothing on stdout, exit 2. Returns the line
// without the program's "name: " prefix.
std::string one_line_refusal(const std::vector<std::string>& argv) {
  const auto r = testing::run_command(argv);
  const std::string what = fmt::format("{}", fmt::join(argv, " "));
  EXPECT_EQ(r.status, 2) << what << "\n" << r.err;
  EXPECT_EQ(r.out, "") << what;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << what << ": not one line:\n" << r.err;
  const size_t colon = r.err.find(": ");
  std::string line = colon == std::string::npos ? r.err : r.err.substr(colon + 2);
  if (!line.empty() && line.back() == '\n') line.pop_back();
  std::printf("%s\n  -> %s\n", what.c_str(), line.c_str());
  return line;
}

TEST(RunFlags, DefaultsAndChoices) {
  EXPECT_EQ(dist::backend_choices(dist::Backends::real), "gloo|nccl");
  EXPECT_EQ(dist::backend_choices(dist::Backends::with_sim), "sim|gloo|nccl");
  EXPECT_EQ(dist::fault_choices(), "exit|hang");
  const dist::RunFlags real = read({}, dist::Backends::real);
  EXPECT_EQ(real.backend, dist::Backend::gloo);
  EXPECT_EQ(real.nproc, 0);
  EXPECT_EQ(real.world_size, 0);
  EXPECT_EQ(real.timeout().count(), 30000);
  EXPECT_EQ(real.fault, dist::Fault::none);
  EXPECT_EQ(read({}, dist::Backends::with_sim).backend, dist::Backend::sim);
  const dist::RunFlags f = read({"--backend", "nccl", "--nproc", "3", "--timeout", "1.5", "--fault", "hang",
                                 "--fault-rank", "2", "--fault-at", "4", "--share-gpus"},
                                dist::Backends::real);
  EXPECT_EQ(f.backend, dist::Backend::nccl);
  EXPECT_EQ(f.nproc, 3);
  EXPECT_EQ(f.timeout().count(), 1500);
  EXPECT_EQ(f.fault, dist::Fault::hang);
  EXPECT_EQ(f.fault_rank, 2);
  EXPECT_EQ(f.fault_at, 4);
  EXPECT_TRUE(f.share_gpus);
  EXPECT_NO_THROW(dist::check_fault_rank(f, 3));
  try {
    dist::check_fault_rank(f, 2);
    ADD_FAILURE() << "--fault-rank 2 accepted at world size 2";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--fault-rank must be in [0, 1] (got 2)");
  }
}

TEST(RunFlags, RefusesWhatCannotTakeEffect) {
  using dist::Backends;
  EXPECT_EQ(refusal({"--backend", "sim"}, Backends::real), "--backend must be one of gloo|nccl (got 'sim')");
  EXPECT_EQ(refusal({"--fault-at", "2"}, Backends::real), "--fault-at needs --fault exit|hang");
  EXPECT_EQ(refusal({"--share-gpus"}, Backends::real), "--share-gpus needs --backend nccl");
  // On the simulator too (it was silently ignored there before the flags were read in one place).
  EXPECT_EQ(refusal({"--nccl-exact"}, Backends::with_sim), "--nccl-exact needs --backend nccl");
  EXPECT_EQ(refusal({"--fault", "exit"}, Backends::with_sim),
            "--fault takes effect only on real ranks (--backend gloo|nccl): the simulator injects no faults");
  EXPECT_EQ(refusal({"--nproc", "2"}, Backends::with_sim),
            "--nproc starts real ranks: use it with --backend gloo|nccl");
  EXPECT_EQ(refusal({"--timeout", "0"}, Backends::with_sim), "--timeout must be in [0.1, 86400] (got 0)");
}

// One list, one error: every program that takes --backend names the same choices, the labs with the
// simulator in front of the real backends.
TEST(RunFlags, EveryProgramOffersTheSameBackends) {
  const std::string real = "--backend must be one of " + dist::backend_choices(dist::Backends::real) + " (got 'tpu')";
  const std::string with_sim =
      "--backend must be one of " + dist::backend_choices(dist::Backends::with_sim) + " (got 'tpu')";
  EXPECT_EQ(with_sim, "--backend must be one of sim|" + dist::backend_choices(dist::Backends::real) + " (got 'tpu')");
  EXPECT_EQ(one_line_refusal({kVerify, "--backend", "tpu", "--nproc", "2"}), real);
  EXPECT_EQ(one_line_refusal({kNcclOrder, "--out", testing::temp_dir() + "/o.json", "--backend", "tpu"}), real);
  EXPECT_EQ(one_line_refusal({kLab001, "--backend", "tpu"}), with_sim);
  EXPECT_EQ(one_line_refusal({kLab004, "--backend", "tpu"}), with_sim);
  // ddp_sim is the simulator alone: it takes no --backend at all.
  EXPECT_EQ(one_line_refusal({kSim, "--backend", "gloo"}), "unknown flag --backend (see --help)");
  // The usage texts show the same lists.
  EXPECT_NE(testing::run_command({kVerify, "--help"}).out.find("--backend gloo|nccl "), std::string::npos);
  EXPECT_NE(testing::run_command({kLab001, "--help"}).out.find("--backend sim|gloo|nccl "), std::string::npos);
}

TEST(RunFlags, EveryProgramOffersTheSameFaultsAndTimeout) {
  const std::string fault = "--fault must be one of " + dist::fault_choices() + " (got 'crash')";
  EXPECT_EQ(one_line_refusal({kVerify, "--nproc", "2", "--fault", "crash"}), fault);
  EXPECT_EQ(one_line_refusal({kLab001, "--backend", "gloo", "--nproc", "2", "--fault", "crash"}), fault);
  EXPECT_EQ(one_line_refusal({kLab004, "--backend", "gloo", "--nproc", "2", "--fault", "crash"}), fault);
  const std::string timeout = "--timeout must be in [0.1, 86400] (got 0)";
  EXPECT_EQ(one_line_refusal({kVerify, "--nproc", "2", "--timeout", "0"}), timeout);
  EXPECT_EQ(one_line_refusal({kLab001, "--timeout", "0"}), timeout);
  EXPECT_EQ(one_line_refusal({kLab004, "--timeout", "0"}), timeout);
}

// The all-reduce algorithms are registered once (collective::algorithm_names); the DDP flags reuse that list.
TEST(RunFlags, EveryProgramOffersTheRegisteredAlgorithms) {
  const std::string want =
      fmt::format("--allreduce must be one of {} (got 'star')", fmt::join(collective::algorithm_names(), "|"));
  EXPECT_EQ(one_line_refusal({kSim, "--allreduce", "star"}), want);
  EXPECT_EQ(one_line_refusal({kVerify, "--nproc", "2", "--allreduce", "star"}), want);
  const std::string usage = fmt::format("--allreduce {} ", fmt::join(collective::algorithm_names(), "|"));
  EXPECT_NE(testing::run_command({kSim, "--help"}).out.find(usage), std::string::npos);
}

}  // namespace
}  // namespace ddplab
