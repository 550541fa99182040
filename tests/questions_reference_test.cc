// The torch scripts behind docs/questions.md's answers that ddplab does not model (sim/questions/*.py), run under
// torch 1.13: each must exit 0 and print the lines the page states (up to the part that varies from run to run,
// such as Gloo's wording of a timeout). Skipped where /usr/bin/python3 cannot import torch.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/testing.h"

namespace ddplab {
namespace {

std::string run_script(const std::string& name) {
  const testing::CommandResult r = testing::run_command(
      {"/usr/bin/env", "OPENBLAS_NUM_THREADS=1", "/usr/bin/python3", "sim/questions/" + name});
  EXPECT_EQ(r.status, 0) << name << ":\n" << r.out << r.err;
  return r.out;
}

void expect_lines(const std::string& out, const std::vector<std::string>& lines) {
  for (const std::string& l : lines) EXPECT_NE(out.find(l), std::string::npos) << "missing: " << l << "\nin:\n" << out;
}

// Question 8: rank-0-only evaluation through the DDP wrapper, a lone barrier, and the two fixes.
TEST(QuestionsReference, RankZeroOnlyWork) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  expect_lines(run_script("rank0_eval.py"),
               {"answer: A3 rank0 issued T1[buf ar] T2[rb buf ar] E[buf] T3[ar] E[buf] -> timed out after 5s",
                "answer: B rank0 issued T1[ar] E[] T2[rb ar] E[] T3[ar] E[] -> completed",
                "answer: C rank0 issued T1[ar] T2[rb ar] BAR[bar] -> timed out after 5s",
                "answer: D rank0 issued T1[buf ar] E[] T2[rb buf ar] E[] T3[buf ar] E[] -> completed",
                "answer: E rank1 issued T1[buf ar] E[buf] T2[rb ar] E[buf] T3[ar] E[buf] -> completed",
                "Detected mismatch between collectives on ranks"});
}

// Question 17: state_dict keys, the load error and its fix, map_location, and an exact resume.
TEST(QuestionsReference, Checkpoints) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  expect_lines(run_script("checkpoint_keys.py"),
               {"fact: ddp.state_dict() keys: module.0.weight", "Unexpected key(s) in state_dict: \"module.0.weight\"",
                "fact: consume_prefix_in_state_dict_if_present(sd, \"module.\") then strict load: <All keys matched "
                "successfully>, equal=True",
                "fact: map_location='cpu': devices=['cpu'] equal=True",
                "fact: resume with optimizer state == uninterrupted (torch.equal, all params and buffers, both ranks): "
                "True",
                "fact: resume without optimizer state == uninterrupted (torch.equal, all params and buffers, both "
                "ranks): False"});
}

// Question 11: reentrant activation checkpointing under DDP, torch's error and the fixes.
TEST(QuestionsReference, ReentrantCheckpointing) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  expect_lines(run_script("reentrant_checkpoint.py"),
               {"answer: re1_fu ck=reentrant uses=1 fu=True sg=no -> error in step 1: Expected to mark a variable ready "
                "only once.",
                "answer: re2 ck=reentrant uses=2 fu=False sg=no -> error in step 1: Expected to mark a variable ready "
                "only once.",
                "answer: nr1_fu ck=nonreentrant uses=1 fu=True sg=no -> trains ranks_equal=True equal_to_plain1=True",
                "answer: re2_sg ck=reentrant uses=2 fu=False sg=arg -> trains ranks_equal=True equal_to_plain2=True"});
}

// Question 12: SyncBatchNorm refused on CPU; what it computes is one BatchNorm over the union batch.
TEST(QuestionsReference, SyncBatchNorm) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const std::string out = run_script("syncbn_cpu.py");
  expect_lines(out, {"fact: DDP(converted model) on CPU: ValueError: SyncBatchNorm layers only work with GPU modules",
                     "running_mean, rank1: equal=True", "running_var (union var * N/(N-1), N=10), rank0: equal=True"});
  // The normalised output is allclose; whether also bitwise equal depends on the processor's kernels.
  const size_t at = out.find("normalized output (this rank's rows), rank0: equal=");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_NE(out.substr(at, out.find('\n', at) - at).find("allclose=True"), std::string::npos) << out;
}

// Question 22: FSDP2 against DDP, under torch 2.x (the venv tools/install_deps.sh --with-torch2 makes; CI has it).
TEST(QuestionsReference, FsdpAgainstDdp) {
  const char* venv = std::getenv("DDPLAB_TORCH2_VENV");
  const std::string py = std::string(venv && *venv ? venv : "/opt/ddplab-torch2") + "/bin/python";
  if (testing::run_command({py, "-c", "from torch.distributed.fsdp import fully_shard"}).status != 0)
    GTEST_SKIP() << py << " has no torch with fully_shard: question 22 not run";
  const testing::CommandResult r =
      testing::run_command({"/usr/bin/env", "OPENBLAS_NUM_THREADS=1", py, "sim/questions/fsdp_vs_ddp.py"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  expect_lines(r.out, {"fact: world_size 3, rank 0 holds (floats): DDP parameters 3403 gradients 3403 momentum 3403 | "
                       "FSDP parameters 1157 gradients 1157 momentum 1157",
                       "fact: world_size 2: FSDP's trained model against DDP's: 3403/3403 floats bitwise equal",
                       "fact: world_size 3: FSDP's trained model against DDP's:",
                       "fact: world_size 4: FSDP's trained model against DDP's:"});
  // From 3 ranks: allclose, and not every float equal (the division and the order differ).
  for (const char* ws : {"3", "4"}) {
    const size_t at = r.out.find(std::string("fact: world_size ") + ws + ": FSDP's trained model");
    ASSERT_NE(at, std::string::npos);
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_NE(line.find("every parameter allclose=True"), std::string::npos) << line;
    EXPECT_EQ(line.find("3403/3403"), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace ddplab
