// The tiny GPT live against torch 1.13: a few configurations drawn from a fixed seed, each run by the oracle
// (sim/gpt_reference.py: real DDP over Gloo, one process per rank; it pins its kernels itself before it imports
// torch) and by `ddp_sim --model gpt`, then every rank's micro-step losses, evaluations, clip norms and final
// parameters compared bit for bit. The goldens (gpt_ddp_test) fix eight configurations; this one walks the
// flag space a little further each time the seed changes. Skipped where /usr/bin/python3 has no torch.
//
// DDPLAB_GPT_LIVE_SEED and DDPLAB_GPT_LIVE_CONFIGS (bazel test --test_env=...) draw other or more
// configurations; the defaults keep the test near a minute on an idle machine.
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::json;

constexpr uint64_t kDefaultSeed = 20261124;
constexpr int kDefaultConfigs = 3;

uint64_t env_or(const char* name, uint64_t def) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : def;
}

// One configuration's flags, the same for both programs. Combinations that torch 1.13 or ddplab refuse are
// not drawn: static_graph only with --no-sync 1 and no aux head; the aux head only with
// find_unused_parameters (without it torch raises, which gpt_ddp_test's error golden covers). Each third
// configuration has one of the DDP semantics forced on, so that any three in a row cover them all: the aux
// head with find_unused_parameters; static_graph; gradient_as_bucket_view with zeros at world size 3 (where
// 1.13's division of an aliased bucket moves bits).
std::vector<std::string> draw_config(std::mt19937_64& rng, int index) {
  auto in = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  auto coin = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
  const int theme = index % 3;
  std::vector<std::string> a;
  auto flag = [&](const char* name, const std::string& value) {
    a.push_back(name);
    a.push_back(value);
  };
  const int64_t ws = theme == 2 ? 3 : in(2, 4), n_head = in(1, 4);
  std::vector<int64_t> widths;  // n_embd in [8, 32], a multiple of n_head
  for (int64_t c = 8; c <= 32; ++c) {
    if (c % n_head == 0) widths.push_back(c);
  }
  const int64_t no_sync = theme == 1 ? 1 : in(1, 3), aux = theme == 0 || coin(30) ? in(1, 2) : 0;
  const bool static_graph = no_sync == 1 && aux == 0 && (theme == 1 || coin(30));
  const bool bucket_view = theme == 2 || coin(50);
  flag("--world-size", std::to_string(ws));
  flag("--n-layer", std::to_string(in(1, 2)));
  flag("--n-head", std::to_string(n_head));
  flag("--n-embd", std::to_string(widths[rng() % widths.size()]));
  flag("--block-size", std::to_string(in(4, 16)));
  flag("--batch-size", std::to_string(in(1, 4)));
  flag("--dropout", coin(50) ? "0" : "0.1");
  flag("--bias", coin(50) ? "true" : "false");
  flag("--gelu", coin(50) ? "none" : "tanh");
  flag("--seed", std::to_string(in(0, 100000)));
  flag("--steps", std::to_string(in(2, 4)));
  flag("--no-sync", std::to_string(no_sync));
  flag("--clip-grad-norm", coin(50) ? "0" : fmt::format("{}", 0.5 + 0.25 * static_cast<double>(in(0, 6))));
  flag("--aux-head-every", std::to_string(aux));
  flag("--find-unused-parameters", aux > 0 || coin(20) ? "true" : "false");
  flag("--static-graph", static_graph ? "true" : "false");
  flag("--gradient-as-bucket-view", bucket_view ? "true" : "false");
  flag("--zero-grad", theme == 2 || coin(50) ? "zeros" : "none");  // zeros: gradients alias their bucket
  flag("--eval-every", std::to_string(coin(50) ? 0 : in(1, 2)));
  flag("--eval-iters", std::to_string(in(1, 2)));
  flag("--lr", coin(50) ? "0.001" : "0.003");
  flag("--weight-decay", coin(50) ? "0.1" : "0");
  flag("--bucket-cap-mb", coin(50) ? "25" : "0.01");  // 0.01: several buckets in iteration 0
  flag("--seed-per-rank", coin(50) ? "true" : "false");
  if (no_sync > 1) flag("--no-sync-loss", coin(50) ? "divide" : "sum");
  return a;
}

struct Tally {
  int64_t equal = 0, total = 0, ulps = 0;
  void add(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
    int64_t eq = 0;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) eq += got[i] == want[i] ? 1 : 0;
    const int64_t u = testing::max_ulps(got, want);
    EXPECT_EQ(got.size(), want.size()) << what;
    EXPECT_EQ(eq, static_cast<int64_t>(want.size()))
        << what << ": " << eq << "/" << want.size() << " bitwise equal, max " << u << " ulps";
    equal += eq;
    total += static_cast<int64_t>(want.size());
    ulps = std::max(ulps, u);
  }
};

void check_live(const std::vector<std::string>& args, const std::string& dir, int index) {
  const std::string want_path = fmt::format("{}/torch{}.json", dir, index);
  const std::string got_path = fmt::format("{}/sim{}.json", dir, index);
  std::vector<std::string> oracle = {"/usr/bin/python3", "sim/gpt_reference.py", "--dump-params", want_path};
  std::vector<std::string> sim = {"sim/ddp_sim", "--model", "gpt", "--quiet", "--dump-params", got_path};
  oracle.insert(oracle.end(), args.begin(), args.end());
  sim.insert(sim.end(), args.begin(), args.end());
  const testing::CommandResult t = testing::run_command(oracle);
  ASSERT_EQ(t.status, 0) << t.err;
  const testing::CommandResult s = testing::run_command(sim);
  const json want = testing::load_json(want_path);
  bool torch_raised = false;
  for (const json& r : want["ranks"]) torch_raised = torch_raised || !r["error"].is_null();
  ASSERT_FALSE(torch_raised) << "torch raised on a configuration drawn to be valid: " << want["ranks"][0]["error"];
  ASSERT_EQ(s.status, 0) << s.err;
  const json got = testing::load_json(got_path);
  const size_t ws = want["world_size"].get<size_t>();
  ASSERT_EQ(got["replicas"].size(), ws);
  Tally params, scalars;
  for (size_t r = 0; r < ws; ++r) {
    const json& gr = want["ranks"][r];
    scalars.add(fmt::format("rank {} losses", r), testing::floats(got["losses"][r]),
                testing::floats(want["losses"][r]));
    scalars.add(fmt::format("rank {} clip norms", r), testing::floats(got["clip_norms"][r]),
                testing::floats(gr["clip_total_norm"]));
    std::vector<float> evals_want, evals_got;
    for (const json& e : gr["eval"]) {
      evals_want.insert(evals_want.end(), {e["step"].get<float>(), e["train"].get<float>(), e["val"].get<float>()});
    }
    for (const json& e : got["evals"][r]) {
      evals_got.insert(evals_got.end(), {e[0].get<float>(), e[1].get<float>(), e[2].get<float>()});
    }
    scalars.add(fmt::format("rank {} evals", r), evals_got, evals_want);
    const json& wp = want["replicas_equal"].get<bool>() ? want["params"] : want["replicas"][r];
    ASSERT_GT(wp.size(), 0u);
    for (const auto& [name, value] : wp.items()) {
      ASSERT_TRUE(got["replicas"][r].contains(name)) << "ddp_sim's dump has no " << name;
      params.add(fmt::format("rank {} {}", r, name), testing::floats(got["replicas"][r][name]), testing::floats(value));
    }
  }
  fmt::print(
      "live {}: {}\n  parameters {}/{} bitwise equal (max {} ulps); losses, evals, clip norms {}/{} (max {} ulps)\n",
      index, fmt::join(args, " "), params.equal, params.total, params.ulps, scalars.equal, scalars.total, scalars.ulps);
}

TEST(GptLive, RandomConfigurationsEqualTorchDdp) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: live GPT check skipped";
  const uint64_t seed = env_or("DDPLAB_GPT_LIVE_SEED", kDefaultSeed);
  const int n = static_cast<int>(env_or("DDPLAB_GPT_LIVE_CONFIGS", kDefaultConfigs));
  std::mt19937_64 rng(seed);
  const std::string dir = testing::temp_dir();
  fmt::print("gpt live: {} configurations from seed {}\n", n, seed);
  for (int i = 0; i < n; ++i) {
    const std::vector<std::string> args = draw_config(rng, i);
    SCOPED_TRACE(fmt::format("configuration {}: {}", i, fmt::join(args, " ")));
    check_live(args, dir, i);
  }
}

}  // namespace
}  // namespace ddplab
