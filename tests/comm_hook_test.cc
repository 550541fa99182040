// DDP communication hooks (issue 18) against real torch DistributedDataParallel on Gloo with torch's own
// hooks registered (tests/golden/hooks/, written by make_hook_goldens.py from sim/ddp_reference.py
// --comm-hook): ddp_sim and ddp_verify --backend gloo equal torch bit for bit, every rank's parameters,
// buffers and losses; and what the goldens teach, checked on torch's own numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::json;
using testing::sim_dump;

const json& configs() {
  static const json c = testing::load_json("tests/golden/hooks/configs.json");
  return c;
}

std::vector<std::string> args_of(const std::string& name) { return configs()[name].get<std::vector<std::string>>(); }

// ddp_sim on every golden of one hook (the configs whose name contains `hook`).
void sim_equals_torch(const std::string& hook) {
  int cases = 0;
  for (const auto& [name, args] : configs().items()) {
    if (name.find(hook) == std::string::npos) continue;
    ++cases;
    testing::expect_dump_bitwise(name, sim_dump(args.get<std::vector<std::string>>()),
                                 testing::load_json("tests/golden/hooks/" + name + ".json"));
  }
  EXPECT_GE(cases, 2) << "goldens of " << hook << " at two world sizes at least";
}

TEST(CommHook, AllreduceHookIsBitwiseTorch) { sim_equals_torch("_allreduce_"); }
TEST(CommHook, Fp16CompressHookIsBitwiseTorch) { sim_equals_torch("_fp16_"); }
TEST(CommHook, PowerSgdHookIsBitwiseTorch) { sim_equals_torch("_powersgd_"); }
TEST(CommHook, NoopHookIsBitwiseTorch) {
  const json torch = testing::load_json("tests/golden/hooks/mlp_noop_ws2.json");
  testing::expect_dump_bitwise("mlp_noop_ws2", sim_dump(args_of("mlp_noop_ws2")), torch);
}

// Real ranks over Gloo, one process each, with the hook: torch's bits, and ddp_sim's dump key for key.
TEST(CommHook, GlooRanksRunEachHookToTorchsBits) {
  for (const std::string name :
       {"mlp_allreduce_ws3", "mlp_fp16_ws3", "mlp_powersgd_ws2", "cnn_fp16_ws2", "cnn_powersgd_ws3", "mlp_noop_ws2"}) {
    const auto config = args_of(name);
    const std::string nproc = name.substr(name.size() - 1);
    std::vector<std::string> args = {"verify/ddp_verify", "--backend", "gloo", "--nproc", nproc, "--quiet"};
    args.insert(args.end(), config.begin(), config.end());
    const std::string out = testing::temp_dir() + "/verify.json";
    args.push_back("--dump-params");
    args.push_back(out);
    const testing::CommandResult r = testing::run_command(args);
    // noop_hook leaves the ranks apart (each real rank equal to its simulated rank): ddp_verify says why;
    // every other hook keeps them equal.
    const bool noop = name == "mlp_noop_ws2";
    ASSERT_EQ(r.status, 0) << name << ": " << r.out << r.err;
    EXPECT_NE(r.out.find(noop ? "verified: the ranks differ, as DDP's semantics make them (--comm-hook noop"
                              : "verified: every rank"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("comm hook "), std::string::npos) << name << ": no hook table\n" << r.out;
    json got = testing::load_json(out);
    testing::expect_dump_bitwise(name + " gloo", got, testing::load_json("tests/golden/hooks/" + name + ".json"));
    got.erase("backend");
    EXPECT_EQ(got, sim_dump(config)) << name << ": ddp_verify's dump is not ddp_sim's";
  }
}

// What the goldens show, on torch's numbers: allreduce_hook's div_(world_size) is the built-in
// multiply by float(1/world_size) at world size 2 (a power of two: the same bits) and not at 3; the
// compressing hooks keep every rank equal (every rank gets the same sums); noop_hook does not.
TEST(CommHook, GoldensShowWhatEachHookDoesToTheBits) {
  for (const auto& [name, ws, same] : std::vector<std::tuple<std::string, int, bool>>{
           {"mlp_allreduce_ws2", 2, true}, {"mlp_allreduce_ws3", 3, false}}) {
    std::vector<std::string> builtin;  // the same run without the hook (ddp_sim equals torch there)
    const auto args = args_of(name);
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--comm-hook") {
        ++i;
      } else {
        builtin.push_back(args[i]);
      }
    }
    const json torch = testing::load_json("tests/golden/hooks/" + name + ".json"), plain = sim_dump(builtin);
    int64_t equal = 0, total = 0;
    for (const auto& [tensor, w] : torch["replicas"][0].items()) {
      const auto b = testing::bits(testing::floats(plain["replicas"][0][tensor]), testing::floats(w));
      equal += b.equal;
      total += b.total;
    }
    std::printf("%s vs no hook: %lld of %lld parameters bitwise equal\n", name.c_str(), static_cast<long long>(equal),
                static_cast<long long>(total));
    EXPECT_EQ(equal == total, same) << name << " at world size " << ws;
  }
  for (const std::string name : {"mlp_fp16_ws3", "cnn_powersgd_ws3", "mlp_noop_ws2"}) {
    const json torch = testing::load_json("tests/golden/hooks/" + name + ".json");
    const size_t last = torch["replicas"].size() - 1;
    EXPECT_EQ(torch["replicas"][0] == torch["replicas"][last], name != "mlp_noop_ws2") << name;
  }
}

TEST(CommHook, ExplainComparesEachBucketWithTheBuiltinAverage) {
  for (const auto& [ws, zero] : std::vector<std::pair<std::string, bool>>{{"2", true}, {"3", false}}) {
    const auto r = testing::run_command({"sim/ddp_sim", "--world-size", ws, "--layers", "32,600,600,10", "--samples",
                                         "48", "--comm-hook", "allreduce", "--explain", "--quiet"});
    ASSERT_EQ(r.status, 0) << r.err;
    const size_t at = r.out.find("comm hook allreduce");
    ASSERT_NE(at, std::string::npos) << r.out;
    // Step 0's single bucket of 386,410 gradients: "0 of 386410" differ at world size 2 only.
    const bool zero_line = r.out.find(" 0 of 386410", at) != std::string::npos;
    EXPECT_EQ(zero_line, zero) << r.out.substr(at);
  }
}

TEST(CommHook, Bf16RunsInTheSimulatorOnlyAsTorchRefusesItOnCpu) {
  const auto sim = testing::run_command({"sim/ddp_sim", "--world-size", "3", "--layers", "32,64,10", "--samples", "48",
                                         "--comm-hook", "bf16-compress", "--explain", "--quiet"});
  ASSERT_EQ(sim.status, 0) << sim.err;
  EXPECT_NE(sim.out.find("bfloat16 x "), std::string::npos) << sim.out;
  EXPECT_NE(sim.out.find("all 3 ranks hold bitwise identical parameters"), std::string::npos) << sim.out;
  const auto gloo =
      testing::run_command({"verify/ddp_verify", "--backend", "gloo", "--nproc", "2", "--comm-hook", "bf16-compress"});
  EXPECT_EQ(gloo.status, 2);
  EXPECT_NE(gloo.err.find("BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+."), std::string::npos)
      << gloo.err;
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: torch's refusal not run";
  const auto torch = testing::run_command(
      {"/usr/bin/python3", "sim/ddp_reference.py", "--world-size", "2", "--comm-hook", "bf16-compress"});
  EXPECT_NE(torch.status, 0);
  EXPECT_NE(torch.err.find("BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+."), std::string::npos)
      << torch.err;
}

TEST(CommHook, BadHookFlagsGetOneLineAndExit2) {
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--comm-hook", "allreduce", "--average", "postdivide"},
                                             {"--comm-hook", "powersgd", "--powersgd-rank", "3"},
                                             {"--comm-hook", "powersgd", "--powersgd-start-iter", "1"},
                                             {"--comm-hook", "fp32"}}) {
    std::vector<std::string> args = {"sim/ddp_sim", "--quiet"};
    args.insert(args.end(), bad.begin(), bad.end());
    const auto r = testing::run_command(args);
    EXPECT_EQ(r.status, 2) << bad[1] << ": " << r.out << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const auto nccl =
      testing::run_command({"verify/ddp_verify", "--backend", "nccl", "--compute", "device", "--nproc", "2",
                            "--comm-hook", "allreduce"});
  EXPECT_EQ(nccl.status, 2);  // the device trainer's buckets have no hook path; --compute host runs the hooks
  EXPECT_NE(nccl.err.find("no hook path"), std::string::npos) << nccl.err;
}

}  // namespace
}  // namespace ddplab
