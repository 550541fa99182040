// Lab 009 (notebooks_ported/009_own_ddp): data parallelism written by hand on 3 real Gloo ranks under torch 1.13,
// in four versions. Each version's classic mistake is named at its step; each fix is exit-0 clean: every collective
// replayed, every stepped gradient explained bit for bit. Its "check:" lines (how many values of the gradient
// stepped with are torch DDP's bits) are torch's own: reference.py runs torch's DistributedDataParallel beside the
// same script, live (the counts follow the processor's kernels, so no golden), and each of its lines must be among
// the lab's. At 3 ranks a part of the values, at 2 all (the lab's closing claim).
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

// The (exact, values) of the lab's "check: <version> at world size N: E of V ..." line.
std::pair<long, long> counts(const std::string& out, const std::string& version) {
  const size_t at = out.find("check: " + version + " at world size ");
  if (at == std::string::npos) return {-1, -1};
  long e = -1, v = -1;
  std::sscanf(out.c_str() + out.find(": ", at + 7) + 2, "%ld of %ld", &e, &v);
  return {e, v};
}

// Every line reference.py prints is among the lab's.
void expect_torch_agrees(const std::string& lab_out, const std::vector<std::string>& ref_args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "300", "/usr/bin/python3", "notebooks_ported/009_own_ddp/reference.py"};
  argv.insert(argv.end(), ref_args.begin(), ref_args.end());
  const auto ref = testing::run_command(argv);
  ASSERT_EQ(ref.status, 0) << ref.err;
  std::printf("reference.py:\n%s", ref.out.c_str());
  size_t lines = 0;
  for (size_t at = 0, end; at < ref.out.size(); at = end + 1) {
    end = ref.out.find('\n', at);
    const std::string line = ref.out.substr(at, end - at);
    if (line.empty()) continue;
    ++lines;
    EXPECT_NE(lab_out.find(line + "\n"), std::string::npos) << "torch says: " << line;
  }
  EXPECT_GT(lines, 0u);
}

TEST(Lab009, EachMistakeNamedEachFixCleanAndTorchCountsTheSame) {
  DDPLAB_SKIP_UNLESS_TORCH("torch1.13");
  const auto r = testing::run_command({"/usr/bin/timeout", "600", "notebooks_ported/009_own_ddp/009_own_ddp"});
  std::printf("%s", r.out.c_str());
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* named : {"PROBLEM hand-sync/never-divided (step 0", "PROBLEM hand-sync/hardcoded-world-size (step 0",
                            "PROBLEM hand-sync/not-waited (step 0", "PROBLEM hand-sync/sync-stopped (step 1"})
    EXPECT_NE(r.out.find(named), std::string::npos) << named;
  const char* averaging[] = {"SUM then / world_size, per parameter", "SUM then / world_size, in one flat buffer",
                             "SUM then / world_size, per parameter", "SUM then / world_size, in 2 buffers"};
  size_t fixed = 0;
  for (size_t at = r.out.find("ddp_check on the fixed run:\n"); at != std::string::npos;
       at = r.out.find("ddp_check on the fixed run:\n", at + 1), ++fixed) {
    const std::string block = r.out.substr(at, r.out.find("\ncheck: ", at) - at);
    EXPECT_NE(block.find("\n  summary: grads 48/48 exact; params 48/48 exact\n"), std::string::npos) << block;
    EXPECT_NE(block.find("replayed in Gloo's order"), std::string::npos) << block;
    if (fixed < 4) {
      EXPECT_NE(block.find("\n  averaging: " + std::string(averaging[fixed])), std::string::npos) << block;
    }
    EXPECT_NE(block.find("\n  findings: none\n  verdict: as-predicted\n"), std::string::npos) << block;
  }
  EXPECT_EQ(fixed, 4u);
  for (const char* v : {"tutorial", "flat", "hooks", "buckets"}) {  // 3 ranks: a part of the values, not all
    const auto [e, n] = counts(r.out, v);
    EXPECT_GT(e, 0) << v;
    EXPECT_LT(e, n) << v;
  }
  expect_torch_agrees(r.out, {});
}

TEST(Lab009, AtTwoRanksEveryValueIsDdps) {
  DDPLAB_SKIP_UNLESS_TORCH("torch1.13");
  const auto r = testing::run_command({"/usr/bin/timeout", "300", "notebooks_ported/009_own_ddp/009_own_ddp", "--version",
                                       "flat", "--world-size", "2"});
  std::printf("%s", r.out.c_str());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto [e, n] = counts(r.out, "flat");
  EXPECT_GT(n, 0);
  EXPECT_EQ(e, n);
  expect_torch_agrees(r.out, {"--world-size", "2", "--version", "flat"});
}

TEST(Lab009, BadFlagsGetOneLine) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--world-size", "9"},
                                               std::vector<std::string>{"--version", "ring"}}) {
    std::vector<std::string> argv = {"notebooks_ported/009_own_ddp/009_own_ddp"};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = testing::run_command(argv);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

}  // namespace
}  // namespace ddplab
