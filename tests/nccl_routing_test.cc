// Issue 32: `ddp_verify --backend nccl` accepts every model and flag that `--backend gloo` accepts. The test
// walks the flag table (src/ddp/flag_table.h): every row has an example here (a row without one fails, so a
// new flag must say how it runs on NCCL), and each example, for each model the row applies to, must get past
// every refusal of ddp_verify on NCCL and reach the start of the ranks. Where no GPU is (this machine, CI),
// that start exits 3 with CUDA's reason: which proves the routing without a GPU; tools/gpu_checks.sh runs the
// paths themselves where one is lent. The device trainer (--compute device) keeps its limits, each refused in
// one line with exit 2.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "src/ddp/config.h"
#include "src/ddp/flag_table.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using Args = std::vector<std::string>;

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const std::string& x : v) out += (out.empty() ? "" : sep) + x;
  return out;
}

// Each row's example: the flags that set it to something other than its default (with what it needs).
const std::map<std::string, Args>& examples() {
  static const std::map<std::string, Args> m = {
      {"world-size", {"--world-size", "2"}},
      {"model", {"--model", "linear(6,8),relu,linear(8,2)"}},
      {"layers", {"--layers", "6,8,2"}},
      {"activation", {"--activation", "relu"}},
      {"loss", {"--loss", "ce"}},
      {"optimizer", {"--optimizer", "adam"}},
      {"lr", {"--lr", "0.1"}},
      {"momentum", {"--momentum", "0.9"}},
      {"dataset", {"--dataset", "rand"}},
      {"data", {"--data", "/usr/share/common-licenses/GPL-3"}},
      {"samples", {"--samples", "32"}},
      {"seed", {"--seed", "7"}},
      {"shuffle", {"--shuffle", "false"}},
      {"sampler-seed", {"--sampler-seed", "3"}},
      {"drop-last", {"--drop-last", "true"}},
      {"loader-drop-last", {"--loader-drop-last", "true"}},
      {"set-epoch", {"--set-epoch", "false"}},
      {"batch-size", {"--batch-size", "4"}},
      {"epochs", {"--epochs", "2"}},
      {"init", {"--init", "per-rank"}},
      {"broadcast", {"--broadcast", "false"}},
      {"broadcast-buffers", {"--broadcast-buffers", "false"}},
      {"seed-per-rank", {"--seed-per-rank", "true"}},
      {"average", {"--average", "postdivide"}},
      {"bucket-cap-mb", {"--bucket-cap-mb", "1"}},
      {"no-sync", {"--no-sync", "2"}},
      {"no-sync-loss", {"--no-sync", "2", "--no-sync-loss", "divide"}},
      {"loss-divisor", {"--loss-divisor", "3"}},
      {"inject-nan", {"--inject-nan", "1:1"}},
      {"sync-on", {"--no-sync", "2", "--sync-on", "first"}},
      {"hand-sync", {"--hand-sync", "flat", "--average", "multiply"}},
      {"sync-batchnorm", {"--sync-batchnorm", "true"}},
      {"allreduce", {"--allreduce", "tree"}},
      {"kernels", {"--kernels", "reference"}},
      {"comm-hook", {"--comm-hook", "fp16-compress"}},
      {"powersgd-rank", {"--comm-hook", "powersgd", "--powersgd-rank", "2"}},
      {"powersgd-start-iter", {"--comm-hook", "powersgd", "--powersgd-start-iter", "3"}},
      {"zero", {"--zero", "true"}},
      {"uneven", {"--uneven", "1", "--join", "true"}},
      {"join", {"--join", "true"}},
      {"join-divide", {"--uneven", "1", "--join", "true", "--join-divide", "active"}},
      {"join-scope", {"--uneven", "1", "--join", "true", "--join-scope", "run"}},
      {"zero-grad", {"--zero-grad", "zeros"}},
      {"find-unused-parameters", {"--find-unused-parameters", "true"}},
      {"static-graph", {"--static-graph", "true"}},
      {"gradient-as-bucket-view", {"--gradient-as-bucket-view", "true"}},
      {"clip-grad-norm", {"--clip-grad-norm", "1.0"}},
      {"n-layer", {"--n-layer", "1"}},
      {"n-head", {"--n-head", "4"}},
      {"n-embd", {"--n-embd", "16"}},
      {"block-size", {"--block-size", "8"}},
      {"dropout", {"--dropout", "0.1"}},
      {"bias", {"--bias", "false"}},
      {"gelu", {"--gelu", "tanh"}},
      {"aux-head-every", {"--aux-head-every", "2"}},
      {"steps", {"--steps", "2"}},
      {"eval-every", {"--eval-every", "2"}},
      {"eval-iters", {"--eval-iters", "1"}},
      {"weight-decay", {"--weight-decay", "0.01"}},
      {"betas", {"--betas", "0.8,0.9"}},
  };
  return m;
}

// The models a row is tried with: every sequential kind (the MLP; the CNN with its digits) and the GPT.
std::vector<Args> models_for(ddp::Applies applies, const std::string& row) {
  const Args mlp = {}, cnn = {"--model", "cnn", "--dataset", "digits"}, gpt = {"--model", "gpt"};
  // Rows that choose the model or the data of the sequential models are tried with the MLP alone.
  const std::set<std::string> mlp_only = {"model", "layers", "activation", "dataset", "samples", "data", "loss"};
  std::vector<Args> out;
  if (applies != ddp::Applies::gpt) out.push_back(mlp);
  if (applies != ddp::Applies::gpt && !mlp_only.count(row)) out.push_back(cnn);
  // The GPT trains on text with AdamW (nanoGPT's): Gloo refuses other data, optimizers and models for it too.
  const std::set<std::string> not_gpt = {"model", "dataset", "samples", "optimizer"};
  if (applies != ddp::Applies::sequential && !not_gpt.count(row)) out.push_back(gpt);
  if (row == "data") out = {gpt};  // the sequential models' default data needs no file
  if (row == "sync-batchnorm") out = {cnn};  // the one with BatchNorm layers to convert
  return out;
}

testing::CommandResult verify(const Args& backend_args, const Args& model, const Args& example) {
  Args cmd = {"verify/ddp_verify", "--nproc", "2", "--quiet"};
  cmd.insert(cmd.end(), backend_args.begin(), backend_args.end());
  cmd.insert(cmd.end(), model.begin(), model.end());
  cmd.insert(cmd.end(), example.begin(), example.end());
  return testing::run_command(cmd);
}

bool no_gpu_here(const testing::CommandResult& r) {
  return r.status == 3 && r.err.find("CUDA") != std::string::npos;
}

TEST(NcclRouting, EveryFlagTableRowHasAnExample) {
  std::vector<std::string> missing;
  for (const ddp::FlagSpec& f : ddp::flag_table())
    if (!examples().count(f.name)) missing.push_back(f.name);
  EXPECT_TRUE(missing.empty()) << "flag table rows with no NCCL routing example: " << join(missing, ", ");
}

TEST(NcclRouting, EveryRowReachesTheRanksOnNccl) {
  const auto probe = verify({"--backend", "nccl"}, {}, {});
  if (!no_gpu_here(probe)) GTEST_SKIP() << "a GPU is here (exit " << probe.status << "): tools/gpu_checks.sh runs these paths";
  int tried = 0;
  for (const ddp::FlagSpec& f : ddp::flag_table()) {
    auto it = examples().find(f.name);
    if (it == examples().end()) continue;
    if (std::string(f.name) == "inject-nan") {  // ddp_sim's alone: ddp_verify refuses it on every backend
      const auto r = verify({"--backend", "nccl"}, {}, it->second);
      EXPECT_EQ(r.status, 2) << r.err;
      EXPECT_NE(r.err.find("--inject-nan is ddp_sim's"), std::string::npos) << r.err;
      continue;
    }
    for (const Args& model : models_for(f.applies, f.name)) {
      const auto r = verify({"--backend", "nccl"}, model, it->second);
      ++tried;
      EXPECT_TRUE(no_gpu_here(r)) << "--" << f.name << " " << join(model, " ") << ": exit " << r.status
                                  << ", " << r.err;
    }
  }
  EXPECT_GE(tried, 80);
  // Gloo's one refusal, a bfloat16 all-reduce, is NCCL's to run.
  EXPECT_EQ(verify({"--backend", "gloo"}, {}, {"--comm-hook", "bf16-compress"}).status, 2);
  EXPECT_TRUE(no_gpu_here(verify({"--backend", "nccl"}, {}, {"--comm-hook", "bf16-compress"})));
}

// The device trainer keeps its limits: each refused in one line that names --compute host, which runs it.
TEST(NcclRouting, TheDeviceTrainerRefusesInOneLineWhatItDoesNotModel) {
  struct Refused {
    Args args;
    std::string says;
  };
  for (const Refused& c : std::vector<Refused>{
           {{"--model", "cnn", "--dataset", "digits"}, "Linear and ReLU layers only"},
           {{"--model", "gpt"}, "(got --model gpt"},
           {{"--loss", "ce"}, "--loss mse only"},
           {{"--comm-hook", "fp16-compress"}, "no hook path"},
           {{"--zero", "true"}, "no ZeroRedundancyOptimizer"},
           {{"--uneven", "1", "--join", "true"}, "has no Join"},
           {{"--no-sync", "2", "--no-sync-loss", "divide"}, "(got --no-sync-loss divide)"},
           {{"--loss-divisor", "3"}, "(got --loss-divisor 3)"},
           {{"--no-sync", "2", "--sync-on", "never"}, "(got --sync-on never)"},
       }) {
    const auto r = verify({"--backend", "nccl", "--compute", "device"}, {}, c.args);
    EXPECT_EQ(r.status, 2) << join(c.args, " ") << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--compute host (the default)"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    const auto host = verify({"--backend", "nccl"}, {}, c.args);
    if (host.status != 3) continue;  // a GPU is here
    EXPECT_TRUE(no_gpu_here(host)) << host.err;
  }
  const auto gloo = verify({"--backend", "gloo", "--compute", "device"}, {}, {});
  EXPECT_EQ(gloo.status, 2);
  EXPECT_NE(gloo.err.find("--compute device needs --backend nccl"), std::string::npos) << gloo.err;
  const auto bad = verify({"--backend", "nccl", "--compute", "gpu"}, {}, {});
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--compute must be host or device (got 'gpu')"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace ddplab
