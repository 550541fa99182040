// The tiny GPT under DDP (src/gpt/train.h gpt::simulate) against torch 1.13 DDP over Gloo with real
// processes (tests/golden/gpt/*.json from sim/gpt_reference.py, one per configuration in configs.json):
// every rank's micro-step losses, evaluations, clip norms and final parameters, the rebuilt buckets, and
// where torch raised when it did, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>

#include "src/base/flags.h"
#include "src/ddp/zero.h"
#include "src/gpt/train.h"
#include "tests/testing.h"

namespace ddplab::gpt {
namespace {

using testing::json;

// A golden's flags: its args, and its config's seed_per_rank where the args leave it out (the goldens were
// written when both programs seeded every rank alike by default; nanoGPT's seed + rank is the default now).
std::vector<std::string> golden_args(const json& g) {
  std::vector<std::string> args;
  for (const auto& a : g["args"]) args.push_back(a.get<std::string>());
  if (std::find(args.begin(), args.end(), "--seed-per-rank") == args.end()) {
    args.insert(args.end(), {"--seed-per-rank", g["config"]["seed_per_rank"].get<bool>() ? "true" : "false"});
  }
  return args;
}

RunConfig config_of(const json& args) {
  std::vector<std::string> argv_s = {"gpt_ddp_test"};
  for (const auto& a : args) argv_s.push_back(a.get<std::string>());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv_s.insert(argv_s.begin() + 1, {"--model", "gpt"});
  argv.clear();
  for (auto& s : argv_s) argv.push_back(s.data());
  const Flags flags(static_cast<int>(argv.size()), argv.data(), ddp::config_flag_names(), {"seed-per-rank"});
  return ddp::config_from_flags(flags);
}

std::vector<float> values(const Parameter& p) { return {p.data(), p.data() + p.numel()}; }

void check(const std::string& name) {
  const json g = testing::load_json("tests/golden/gpt/" + name + ".json");
  RunConfig cfg = config_of(golden_args(g));
  const TextData data = TextData::load(cfg.data);
  cfg.gpt.vocab_size = data.vocab_size();
  ASSERT_EQ(cfg.gpt.vocab_size, g["vocab_size"].get<int64_t>());
  const GptSimResult res = gpt::simulate(cfg, data);
  ASSERT_EQ(res.ranks.size(), g["ranks"].size());
  int64_t equal = 0, total = 0;
  for (size_t r = 0; r < res.ranks.size(); ++r) {
    const GptRank& rk = *res.ranks[r];
    const json& gr = g["ranks"][r];
    // Losses of every micro-step, evaluations and clip norms: floats written by the same code on every rank.
    EXPECT_EQ(rk.log.losses, testing::floats(g["losses"][r])) << name << " rank " << r << " losses";
    ASSERT_EQ(rk.log.evals.size(), gr["eval"].size()) << name;
    for (size_t e = 0; e < rk.log.evals.size(); ++e) {
      EXPECT_EQ(rk.log.evals[e].step, gr["eval"][e]["step"].get<int64_t>());
      EXPECT_EQ(rk.log.evals[e].train, gr["eval"][e]["train"].get<float>()) << name << " eval " << e;
      EXPECT_EQ(rk.log.evals[e].val, gr["eval"][e]["val"].get<float>()) << name << " eval " << e;
    }
    EXPECT_EQ(rk.clip_norms, testing::floats(gr["clip_total_norm"])) << name << " clip norms";
    const json& params = g["replicas_equal"].get<bool>() ? g["params"] : g["replicas"][r];
    for (const Parameter* p : rk.params) {
      const auto m =
          testing::match(fmt::format("{} rank {} {}", name, r, p->name), values(*p), testing::floats(params[p->name]));
      EXPECT_EQ(m.equal, m.total) << p->name;
      equal += m.equal;
      total += m.total;
    }
    // Where torch raised, and the parameters it named (TORCH_DISTRIBUTED_DEBUG=DETAIL).
    if (gr["error"].is_null()) {
      EXPECT_FALSE(res.error) << name << ": the simulator stopped, torch did not";
    } else {
      ASSERT_TRUE(res.error) << name << ": torch raised, the simulator did not";
      EXPECT_EQ(res.error->step, gr["error"]["step"].get<int64_t>());
      EXPECT_EQ(res.error->micro, gr["error"]["micro"].get<int64_t>());
      const std::string msg = gr["error"]["message"];
      EXPECT_NE(msg.find("Expected to have finished reduction in the prior iteration"), std::string::npos);
      for (const std::string& p : res.error->params) {
        EXPECT_NE(msg.find(p), std::string::npos) << "torch's message does not name " << p;
      }
    }
    // The buckets at the end (rebuilt in gradient-ready order, or never rebuilt with find_unused_parameters).
    std::vector<std::vector<std::string>> buckets;
    for (size_t b = 0; b < rk.reducer->num_buckets(); ++b) {
      buckets.emplace_back();
      for (size_t i : rk.reducer->bucket(b).params) buckets.back().push_back(rk.params[i]->name);
    }
    EXPECT_EQ(buckets, gr["buckets"]["buckets"].get<std::vector<std::vector<std::string>>>()) << name;
    if (g.contains("zero")) {  // 1.13's partition over AdamW's two groups, and the state each rank holds
      const auto& zero = dynamic_cast<const ddp::ZeroRedundancyOptimizer&>(*rk.optimizer);
      std::vector<std::string> mine, torch;
      for (size_t i : zero.partition()[r]) mine.push_back(rk.params[i]->name);
      for (const auto& group : g["zero"]["partition"][r]) {
        for (const auto& n : group) torch.push_back(n.get<std::string>());
      }
      EXPECT_EQ(mine, torch) << name << " rank " << r << " partition";
      EXPECT_EQ(rk.optimizer->state_numel(), g["zero"]["state_numel"][r].get<int64_t>()) << name << " rank " << r;
    }
  }
  fmt::print("{}: {}/{} parameter floats bitwise equal over {} ranks\n", name, equal, total, res.ranks.size());
}

// ddp_sim --model gpt --threads N: the ranks compute side by side between collectives, each writing only its
// own model, generator and log, so every bit is one thread's (dropout masks, ZeRO and Join included).
TEST(GptDdp, ThreadsGiveTheBitsOfOneThread) {
  RunConfig cfg = config_of(json::array({"--world-size", "3", "--dropout", "0.1", "--seed-per-rank", "--zero", "true",
                                         "--uneven", "1", "--join", "true", "--n-embd", "16", "--block-size", "8"}));
  const TextData data = TextData::load(cfg.data);
  cfg.gpt.vocab_size = data.vocab_size();
  cfg.threads = 1;
  const GptSimResult one = gpt::simulate(cfg, data);
  cfg.threads = 3;
  const GptSimResult three = gpt::simulate(cfg, data);
  int64_t floats = 0;
  for (size_t r = 0; r < one.ranks.size(); ++r) {
    EXPECT_EQ(one.ranks[r]->log.losses, three.ranks[r]->log.losses) << "rank " << r;
    for (size_t i = 0; i < one.ranks[r]->params.size(); ++i) {
      EXPECT_EQ(values(*one.ranks[r]->params[i]), values(*three.ranks[r]->params[i])) << one.ranks[r]->params[i]->name;
      floats += one.ranks[r]->params[i]->numel();
    }
  }
  fmt::print("--threads 3 vs 1: {} parameter floats over {} ranks compared bitwise\n", floats, one.ranks.size());
}

class GptDdp : public ::testing::TestWithParam<std::string> {};

TEST_P(GptDdp, EqualsTorchDdpOverGloo) { check(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Goldens, GptDdp,
                         ::testing::Values("gpt_ws2_default", "gpt_ws4_dropout_seed_per_rank_nosync2",
                                           "gpt_ws3_clip_bucket_view_zeros", "gpt_ws2_aux_find_unused",
                                           "gpt_ws2_gelu_tanh_nobias_eval", "gpt_ws2_aux_unused_error",
                                           // torch's comm hooks (issue 18)
                                           "gpt_ws2_allreduce_hook", "gpt_ws3_allreduce_hook", "gpt_ws2_fp16_hook",
                                           "gpt_ws3_fp16_hook", "gpt_ws2_powersgd_hook",
                                           "gpt_ws3_powersgd_rank2_hook",
                                           // ZeroRedundancyOptimizer and Join on the GPT (issue 27)
                                           "gpt_ws2_zero", "gpt_ws3_zero", "gpt_ws2_uneven1_join",
                                           "gpt_ws3_uneven1_join", "gpt_ws2_uneven1_join_zero",
                                           "gpt_ws3_uneven1_join_zero"));

// The same against real ranks: ddp_verify --model gpt --backend gloo, one process per rank, its dump.
void check_verifier(const std::string& name, int expected_status) {
  const json g = testing::load_json("tests/golden/gpt/" + name + ".json");
  const std::string dump = testing::temp_dir() + "/dump.json";
  std::vector<std::string> argv = {"verify/ddp_verify",
                                   "--model",
                                   "gpt",
                                   "--backend",
                                   "gloo",
                                   "--nproc",
                                   std::to_string(g["world_size"].get<int>()),
                                   "--quiet",
                                   "--dump-params",
                                   dump,
                                   "--timeout",
                                   "20"};
  for (const std::string& a : golden_args(g)) argv.push_back(a);
  const testing::CommandResult r = testing::run_command(argv);
  ASSERT_EQ(r.status, expected_status) << r.out << r.err;
  const json d = testing::load_json(dump);
  int64_t equal = 0, total = 0;
  for (size_t rank = 0; rank < d["replicas"].size(); ++rank) {
    EXPECT_EQ(testing::floats(d["losses"][rank]), testing::floats(g["losses"][rank])) << name << " rank " << rank;
    EXPECT_EQ(testing::floats(d["clip_norms"][rank]), testing::floats(g["ranks"][rank]["clip_total_norm"]));
    const json& evals = g["ranks"][rank]["eval"];
    ASSERT_EQ(d["evals"][rank].size(), evals.size()) << name;
    for (size_t e = 0; e < evals.size(); ++e) {
      EXPECT_EQ(d["evals"][rank][e][1].get<float>(), evals[e]["train"].get<float>()) << name << " eval " << e;
      EXPECT_EQ(d["evals"][rank][e][2].get<float>(), evals[e]["val"].get<float>()) << name << " eval " << e;
    }
    const json& params = g["replicas_equal"].get<bool>() ? g["params"] : g["replicas"][rank];
    for (const auto& [pname, value] : d["replicas"][rank].items()) {
      const auto m = testing::match(fmt::format("ddp_verify {} rank {} {}", name, rank, pname), testing::floats(value),
                                    testing::floats(params[pname]));
      equal += m.equal;
      total += m.total;
    }
  }
  EXPECT_EQ(equal, total);
  EXPECT_GT(total, 0);
  fmt::print("ddp_verify {}: {}/{} parameter floats bitwise equal to torch's\n", name, equal, total);
}

TEST(GptDdp, VerifierOverGlooEqualsTorch) {
  for (const char* name :
       {"gpt_ws2_default", "gpt_ws4_dropout_seed_per_rank_nosync2", "gpt_ws3_clip_bucket_view_zeros",
        "gpt_ws2_aux_find_unused", "gpt_ws2_gelu_tanh_nobias_eval", "gpt_ws3_fp16_hook", "gpt_ws2_powersgd_hook",
        "gpt_ws3_zero", "gpt_ws3_uneven1_join", "gpt_ws3_uneven1_join_zero"}) {
    check_verifier(name, 0);
  }
  check_verifier("gpt_ws2_aux_unused_error", 1);  // torch's ranks raise; ours stop at the same step
}

// The GPT runs on NCCL with the model on the host (tests/nccl_routing_test.cc); the device trainer refuses it.
TEST(GptDdp, TheDeviceTrainerRefusesItInOneLine) {
  const testing::CommandResult r = testing::run_command(
      {"verify/ddp_verify", "--model", "gpt", "--backend", "nccl", "--compute", "device", "--nproc", "2"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--compute device keeps the model on the GPU for Linear and ReLU layers only (got --model gpt"),
            std::string::npos)
      << r.err;
}

TEST(GptDdp, EveryGoldenIsTested) {
  const json configs = testing::load_json("tests/golden/gpt/configs.json");
  int ddp = 0;
  for (const auto& [k, v] : configs.items()) ddp += k.rfind("gpt_single", 0) == 0 ? 0 : 1;
  EXPECT_EQ(ddp, 18) << "a golden in configs.json is not in the list above";
}

}  // namespace
}  // namespace ddplab::gpt
