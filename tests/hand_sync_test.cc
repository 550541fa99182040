// ddp_check on data parallelism written by hand (tests/ddp_check/scripts/hand_sync.py: an MLP, SGD with momentum,
// 3 Gloo ranks unless said, no DistributedDataParallel), under torch 1.13 and torch 2.x, traced with the same three
// lines as a DDP run:
//  - each course style clean: exit 0, every collective the script called replayed bit for bit, every gradient the
//    optimizer stepped with explained (replayed) bit for bit, the averaging named; against torch's DDP from the
//    same local gradients some values differ at 3 ranks (a + b + c depends on the order) and none at 2;
//  - "vs_ddp" against torch itself: the script run untraced beside torch's own DDP on a copy of the model
//    (--oracle) counts how many values of the step-0 gradient are DDP's bits; ddp_check must count the same from
//    the trace alone;
//  - one classic mistake per case: exit 1 and its finding (kind, cause, step, parameter);
//  - traced equals untraced, bit for bit.
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::json;

struct Case {
  const char* label;
  const char* args;    // hand_sync.py's options
  const char* cause;   // hand-sync/<cause> (or <kind>/<cause>) expected, or nullptr: a clean run
  int step;            // where the finding must point
  const char* name;    // its parameter ("" : any)
  const char* averaging = "";  // the "averaging" line must start so (clean runs)
  bool torch2_only = false;    // register_post_accumulate_grad_hook and ReduceOp.AVG on Gloo are torch 2.x's
};

const Case kCases[] = {
    {"tutorial", "--style tutorial", nullptr, -1, "", "SUM then / world_size, per parameter"},
    {"multiply", "--style multiply", nullptr, -1, "", "SUM then * (1 / world_size), per parameter"},
    {"predivide", "--style predivide", nullptr, -1, "", "/ world_size then SUM, per parameter"},
    {"flat", "--style flat", nullptr, -1, "", "SUM then / world_size, in one flat buffer"},
    {"buckets", "--style buckets", nullptr, -1, "", "SUM then / world_size, in 2 buffers"},
    {"accumulate", "--style tutorial --accumulate 2", nullptr, -1, "", "SUM then / world_size, per parameter"},
    {"ws2", "--style tutorial --world-size 2", nullptr, -1, "", "SUM then / world_size, per parameter"},
    {"ws4_flat", "--style flat --world-size 4", nullptr, -1, "", "SUM then / world_size, in one flat buffer"},
    {"hooks", "--style hooks", nullptr, -1, "", "SUM then / world_size, per parameter", true},
    {"avg", "--style avg", nullptr, -1, "", "AVG, per parameter", true},
    {"hook_buckets", "--style hook_buckets", nullptr, -1, "", "SUM then / world_size, in 2 buffers", true},
    {"no_divide", "--mistake no_divide", "never-divided", 0, ""},
    {"divide_twice", "--mistake divide_twice", "divided-twice", 0, ""},
    {"hardcoded_ws", "--mistake hardcoded_ws", "hardcoded-world-size", 0, ""},
    {"flat_no_divide", "--style flat --mistake no_divide", "never-divided", 0, ""},
    {"skip_bias", "--mistake skip_bias", "not-synchronised", 0, "module.0.bias"},
    {"no_broadcast", "--mistake no_broadcast", "no-broadcast", 0, ""},
    {"double_grad", "--mistake double_grad", "doubled-by-hook", 0, ""},
    {"hook_param", "--style hooks --mistake hook_param", "parameter-reduced", 0, "", "", true},
    {"no_wait", "--style hooks --mistake no_wait", "not-waited", 0, "", "", true},
    {"no_reset", "--style hook_buckets --mistake no_reset", "sync-stopped", 1, "", "", true},
    // DDP and the script's own average on top of it: a DDP run (DDP's replay as ever), the extra all-reduce named.
    {"on_ddp", "--mistake on_ddp", "on-top-of-ddp", 0, "0.weight"},
    {"last_micro", "--style flat --accumulate 2 --mistake last_micro", "last-micro-batch-only", 0, ""},
    {"no_sampler", "--mistake no_sampler", "same-data-on-all-ranks/", 0, ""},
    // ZeRO-1 by hand: each rank's optimizer steps its share, then broadcasts it; the owner's step is every rank's.
    // Adam for 14 steps: past the full steps, the whole-run sample replays each rank's share only.
    {"zero1", "--shard byhand", nullptr, -1, "", "SUM then / world_size, per parameter"},
    {"zero1_adam", "--shard byhand --optimizer adam --steps 14", nullptr, -1, "", "SUM then / world_size, per parameter"},
    {"zero1_plain", "--shard plain --style flat", nullptr, -1, "", "SUM then / world_size, in one flat buffer"},
    {"zero1_no_broadcast", "--shard byhand --mistake no_shard_broadcast", "zero1/not-broadcast", 0, ""},
};

std::vector<std::tuple<std::string, Case>> all_cases() {
  std::vector<std::tuple<std::string, Case>> out;
  for (const Case& c : kCases)
    for (const char* torch : {"torch1.13", "torch2"})
      if (!c.torch2_only || std::string(torch) == "torch2") out.emplace_back(torch, c);
  return out;
}

std::vector<std::string> argv_for(const std::string& torch, const std::string& args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "300", testing::python_for(torch),
                                   "tests/ddp_check/scripts/hand_sync.py"};
  std::string w;
  for (char ch : args + " ") {
    if (ch != ' ') {
      w += ch;
    } else if (!w.empty()) {
      argv.push_back(w);
      w.clear();
    }
  }
  return argv;
}

// Runs the script traced into a fresh directory and ddp_check on it: (ddp_check's text, its --json).
std::pair<std::string, json> traced(const std::string& torch, const std::string& args, int want_status) {
  setenv("DDPLAB_START_METHOD", "fork", 1);
  const std::string dir = testing::temp_dir() + "/run", json_path = testing::temp_dir() + "/check.json";
  std::vector<std::string> argv = argv_for(torch, args);
  argv.insert(argv.end(), {"--out", dir});
  const auto run = testing::run_command(argv);
  EXPECT_EQ(run.status, 0) << run.err.substr(run.err.size() > 3000 ? run.err.size() - 3000 : 0);
  const auto check = testing::run_command({"verify/ddp_check", dir, "--json", json_path, "--quiet"});
  std::printf("hand_sync.py %s under %s:\n%s", args.c_str(), torch.c_str(), check.out.c_str());
  EXPECT_EQ(check.status, want_status) << check.err;
  return {check.out, testing::load_json(json_path)};
}

// Every rank's parameters after each step as torch.optim computes them: bit for bit, or within rounding where the
// step is allclose by design (Adam under a pip torch, whose float sqrt is MKL's, not IEEE's: "step_why" says so).
void expect_steps_predicted(const json& j) {
  EXPECT_GT(j["params"]["checked"].get<int64_t>(), 0);
  EXPECT_EQ(j["params"]["different"], 0);
  if (j["step_exact"].get<bool>()) {
    EXPECT_EQ(j["params"]["exact"], j["params"]["checked"]);
  }
}

class HandSync : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(HandSync, Checked) {
  const auto& [torch, c] = GetParam();
  DDPLAB_SKIP_UNLESS_TORCH(torch);
  const auto [text, j] = traced(torch, c.args, c.cause ? 1 : 0);
  ASSERT_EQ(j["sync"], std::string(c.label) == "on_ddp" ? "ddp" : "hand");
  const json& h = j["hand"];
  if (!c.cause) {  // clean: nothing found, every collective and every stepped gradient replayed bit for bit
    EXPECT_EQ(j["verdict"], "as-predicted");
    EXPECT_TRUE(j["findings"].empty()) << text;
    EXPECT_GT(h["collectives"].get<int64_t>(), 0);
    EXPECT_EQ(h["replayed"], h["collectives"]);
    EXPECT_EQ(h["exact"], h["replayed"]);
    EXPECT_GT(j["grads"]["checked"].get<int64_t>(), 0);
    EXPECT_EQ(j["grads"]["exact"], j["grads"]["checked"]);
    expect_steps_predicted(j);
    EXPECT_EQ(h["averaging"].get<std::string>().rfind(c.averaging, 0), 0u) << h["averaging"];
    if (std::string(c.args).find("--shard") != std::string::npos) {  // every rank's step is its owner's
      EXPECT_NE(j["zero1"].get<std::string>().find("rank 2: 2"), std::string::npos) << j["zero1"];
      EXPECT_EQ(j["params"]["checked"].get<int64_t>(), 6 * 3 * std::min<int64_t>(j["steps"].get<int64_t>(), 10));
    } else {
      EXPECT_TRUE(j["zero1"].is_null());
    }
    // Against DDP: within rounding everywhere; at 2 ranks the very bits (a + b = b + a, and halving is exact),
    // at 3 or more not (the order of three additions, and / 3 against * float(1/3)).
    const json& v = h["values"];
    EXPECT_EQ(v["different"], 0);
    EXPECT_GT(v["checked"].get<int64_t>(), 0);
    if (std::string(c.label) == "ws2") {
      EXPECT_EQ(v["exact"], v["checked"]);
    } else {
      EXPECT_LT(v["exact"].get<int64_t>(), v["checked"].get<int64_t>());
    }
    return;
  }
  EXPECT_EQ(j["verdict"], "problems");
  const std::string want = std::string(c.cause).find('/') == std::string::npos ? std::string("hand-sync/") + c.cause
                                                                                : std::string(c.cause);
  const json* f = nullptr;
  for (const json& x : j["findings"])
    if (x["kind"].get<std::string>() + "/" + x["cause"].get<std::string>() == want && !f) f = &x;
  ASSERT_NE(f, nullptr) << "no " << want << " in:\n" << text;
  EXPECT_EQ((*f)["severity"], "problem");
  EXPECT_EQ((*f)["step"], c.step);
  if (*c.name) {
    EXPECT_EQ((*f)["name"], c.name);
  }
}

// A model with BatchNorm: its running statistics are buffers no hand-written gradient sync touches. Without a
// broadcast each rank keeps its own (what DDP's broadcast_buffers=False does): a note at the first step, the
// gradients still replayed bit for bit; with rank 0's broadcast before every forward (DDP's default) none, and the
// broadcasts are replayed with the all-reduces.
class HandSyncBatchNorm : public ::testing::TestWithParam<std::string> {};

TEST_P(HandSyncBatchNorm, BuffersNamedUnlessBroadcast) {
  const std::string torch = GetParam();
  DDPLAB_SKIP_UNLESS_TORCH(torch);
  for (const bool broadcast : {false, true}) {
    const auto [text, j] = traced(torch, std::string("--batchnorm") + (broadcast ? " --broadcast-buffers" : ""), 0);
    EXPECT_EQ(j["grads"]["exact"], j["grads"]["checked"]);
    EXPECT_EQ(j["hand"]["exact"], j["hand"]["replayed"]);
    const json* f = nullptr;
    for (const json& x : j["findings"])
      if (x["kind"] == "buffers-differ" && !f) f = &x;
    if (broadcast) {
      EXPECT_TRUE(j["findings"].empty()) << text;
      // 4 steps of 8 parameters' all-reduces and 3 buffers' broadcasts; num_batches_tracked's (int64) not replayed
      EXPECT_EQ(j["hand"]["collectives"], 4 * (8 + 3));
      EXPECT_EQ(j["hand"]["replayed"], 4 * (8 + 2));
    } else {
      ASSERT_NE(f, nullptr) << text;
      EXPECT_EQ((*f)["severity"], "note");
      EXPECT_EQ((*f)["cause"], "hand");
      EXPECT_EQ((*f)["step"], 0);
      EXPECT_NE((*f)["message"].get<std::string>().find("broadcast_buffers=False"), std::string::npos);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Torches, HandSyncBatchNorm, ::testing::Values("torch1.13", "torch2"),
                         [](const auto& info) { return info.param == "torch2" ? "torch2" : "torch1_13"; });

// ReduceOp.AVG on torch 1.13's Gloo: torch raises, the script ends there, and ddp_check names the call, torch's own
// error and the fix from the manifest the recorder wrote before the error went on (torch 2.x runs it: "avg" above).
TEST(HandSyncTorch113, AvgOnGlooRaises) {
  DDPLAB_SKIP_UNLESS_TORCH("torch1.13");
  setenv("DDPLAB_START_METHOD", "fork", 1);
  const std::string dir = testing::temp_dir() + "/avg", json_path = testing::temp_dir() + "/avg.json";
  std::vector<std::string> argv = argv_for("torch1.13", "--style avg");
  argv.insert(argv.end(), {"--out", dir});
  const auto run = testing::run_command(argv);
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.err.find("Cannot use ReduceOp.AVG with Gloo"), std::string::npos) << run.err;
  const auto check = testing::run_command({"verify/ddp_check", dir, "--json", json_path});
  std::printf("%s", check.out.c_str());
  EXPECT_EQ(check.status, 1) << check.err;
  const json j = testing::load_json(json_path);
  const json* f = nullptr;
  for (const json& x : j["findings"])
    if (x["cause"] == "collective-raised" && !f) f = &x;
  ASSERT_NE(f, nullptr) << check.out;
  EXPECT_EQ((*f)["step"], 0);
  EXPECT_NE((*f)["message"].get<std::string>().find("RuntimeError: Cannot use ReduceOp.AVG with Gloo"), std::string::npos);
  EXPECT_NE((*f)["message"].get<std::string>().find("ReduceOp.SUM, then divide"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Styles, HandSync, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  return std::string(std::get<0>(info.param) == "torch2" ? "torch2_" : "torch1_13_") + std::get<1>(info.param).label;
});

// ZeRO-1 under torch's DistributedDataParallel: torch's ZeroRedundancyOptimizer (its own partition, by size) and
// the hand-written one, Adam; every rank's step is its owner's, bit for bit.
class Zero1OnDdp : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(Zero1OnDdp, OwnersStepIsEveryRanks) {
  const auto& [torch, shard] = GetParam();
  DDPLAB_SKIP_UNLESS_TORCH(torch);
  const auto [text, j] = traced(torch, "--style ddp --optimizer adam --shard " + shard, 0);
  EXPECT_EQ(j["sync"], "ddp");
  EXPECT_EQ(j["verdict"], "as-predicted");
  EXPECT_TRUE(j["findings"].empty()) << text;
  EXPECT_GT(j["params"]["checked"].get<int64_t>(), 0);
  expect_steps_predicted(j);
  EXPECT_NE(j["zero1"].get<std::string>().find(shard == "torch" ? "ZeroRedundancyOptimizer's Adam" : "ShardedOptimizer's Adam"),
            std::string::npos) << j["zero1"];
}

INSTANTIATE_TEST_SUITE_P(Torches, Zero1OnDdp,
                         ::testing::Values(std::make_tuple("torch1.13", "torch"), std::make_tuple("torch2", "torch"),
                                           std::make_tuple("torch2", "byhand")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == "torch2" ? "torch2_" : "torch1_13_") +
                                  std::get<1>(info.param);
                         });

// ddp_check's "vs_ddp" against torch's own DDP: at step 0 the values of the hand-written average that are the bits
// torch's DistributedDataParallel computes from the same weights and batch (hand_sync.py --oracle, untraced), and
// the same count from the trace alone. At 3 ranks they are a part, not all (a claim of docs/questions.md).
class HandVsDdp : public ::testing::TestWithParam<std::tuple<std::string, std::string, int>> {};

TEST_P(HandVsDdp, CountsWhatTorchDdpCounts) {
  const auto& [torch, style, ws] = GetParam();
  const std::string args = "--steps 1 --world-size " + std::to_string(ws) + " --style " + style;
  DDPLAB_SKIP_UNLESS_TORCH(torch);
  const std::string oracle = testing::temp_dir() + "/oracle.json";
  std::vector<std::string> argv = argv_for(torch, "--no-trace " + args);
  argv.insert(argv.end(), {"--oracle", oracle});
  setenv("DDPLAB_START_METHOD", "fork", 1);
  const auto run = testing::run_command(argv);
  ASSERT_EQ(run.status, 0) << run.err;
  const json want = testing::load_json(oracle);
  const auto [text, j] = traced(torch, args, 0);
  const json& v = j["hand"]["values"];
  std::printf("%s under %s: torch's DDP agrees with the hand-written average in %lld of %lld values; ddp_check "
              "counts %lld of %lld\n",
              style.c_str(), torch.c_str(), static_cast<long long>(want["exact"].get<int64_t>()),
              static_cast<long long>(want["values"].get<int64_t>()), static_cast<long long>(v["exact"].get<int64_t>()),
              static_cast<long long>(v["checked"].get<int64_t>()));
  EXPECT_EQ(v["checked"], want["values"]);
  EXPECT_EQ(v["exact"], want["exact"]);
  if (ws == 2) {  // a + b = b + a, and halving is exact: every value is DDP's
    EXPECT_EQ(want["exact"], want["values"]);
  } else {
    EXPECT_LT(want["exact"].get<int64_t>(), want["values"].get<int64_t>());
  }
}

INSTANTIATE_TEST_SUITE_P(Torches, HandVsDdp,
                         ::testing::Values(std::make_tuple("torch1.13", "tutorial", 3),
                                           std::make_tuple("torch1.13", "tutorial", 4),  // 1/4 exact: the order alone
                                           std::make_tuple("torch1.13", "flat", 3),
                                           std::make_tuple("torch1.13", "predivide", 2),
                                           std::make_tuple("torch2", "multiply", 3), std::make_tuple("torch2", "hooks", 3),
                                           std::make_tuple("torch2", "avg", 2)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == "torch2" ? "torch2_" : "torch1_13_") +
                                  std::get<1>(info.param) + "_ws" + std::to_string(std::get<2>(info.param));
                         });

// The recorder only observes: traced and untraced end with bitwise equal parameters on every rank (its hooks put
// first, the collectives and Work.wait wrapped). Buckets with two micro-batches a step; the hooks style without
// (under accumulation its hooks all-reduce each micro-batch's .grad while the next backward adds into it: a race
// of the script's own, untraced too).
class HandTraced : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(HandTraced, EqualsUntraced) {
  const auto& [torch, style] = GetParam();
  DDPLAB_SKIP_UNLESS_TORCH(torch);
  setenv("DDPLAB_START_METHOD", "fork", 1);
  std::string out[2];
  for (int traced = 0; traced < 2; ++traced) {
    const std::string final_path = testing::temp_dir() + "/final" + std::to_string(traced) + ".json";
    // "zero1": CS336's sharded optimizer over Adam (the holder's step() wrapped); "zero1_ddp": torch's
    // ZeroRedundancyOptimizer under DDP.
    const std::string args = style == "zero1"       ? "--shard byhand --optimizer adam --accumulate 2"
                             : style == "zero1_ddp" ? "--style ddp --shard torch --optimizer adam"
                             : "--style " + style + (style == "hooks" ? "" : " --accumulate 2");
    std::vector<std::string> argv = argv_for(torch, "--steps 6 " + args);
    if (traced) {
      argv.insert(argv.end(), {"--out", testing::temp_dir() + "/traced"});
    } else {
      argv.push_back("--no-trace");
    }
    argv.insert(argv.end(), {"--final", final_path});
    const auto run = testing::run_command(argv);
    ASSERT_EQ(run.status, 0) << run.err;
    out[traced] = testing::run_command({"/bin/cat", final_path}).out;
  }
  EXPECT_FALSE(out[0].empty());
  EXPECT_EQ(out[0], out[1]);
}

INSTANTIATE_TEST_SUITE_P(Torches, HandTraced,
                         ::testing::Values(std::make_tuple("torch1.13", "buckets"), std::make_tuple("torch2", "hooks"),
                                           std::make_tuple("torch1.13", "zero1"), std::make_tuple("torch2", "zero1_ddp")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == "torch2" ? "torch2_" : "torch1_13_") +
                                  std::get<1>(info.param);
                         });

}  // namespace
}  // namespace ddplab
