// Uneven inputs (issue 18 item 3): ddp_sim and ddp_verify --backend gloo against real torch DDP inside
// torch.distributed.algorithms.Join (tests/golden/join/, written by make_join_goldens.py from
// sim/ddp_reference.py), bit for bit: every rank's parameters and buffers, every loss (rank r logs B - K*r per
// epoch), the sampler's indices and the test predictions. Without Join: the one line, and no hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::json;

testing::CommandResult run_dump(std::vector<std::string> args, const std::string& out) {
  for (const char* a : {"--quiet", "--dump-params"}) args.push_back(a);
  args.push_back(out);
  return testing::run_command(args);
}

// Every float of every tensor, every loss, the indices and test predictions of `got` bitwise `want`'s.
void expect_torch_bits(const std::string& label, const json& got, const json& want) {
  EXPECT_EQ(got["sampler_indices"], want["sampler_indices"]) << label;
  ASSERT_EQ(got["replicas"].size(), want["replicas"].size()) << label;
  for (size_t r = 0; r < want["replicas"].size(); ++r) {
    std::vector<float> g, w;
    for (const char* key : {"replicas", "buffers"}) {
      if (!want.contains(key)) continue;
      for (const auto& [name, v] : want[key][r].items()) {
        ASSERT_TRUE(got[key][r].contains(name)) << label << ": no " << name;
        const auto gv = testing::floats(got[key][r][name]), wv = testing::floats(v);
        g.insert(g.end(), gv.begin(), gv.end());
        w.insert(w.end(), wv.begin(), wv.end());
      }
    }
    const std::string rank = label + " rank" + std::to_string(r);
    EXPECT_TRUE(testing::print_bits(rank + " parameters+buffers", g, w, 44).exact()) << rank;
    EXPECT_TRUE(
        testing::print_bits(rank + " losses", testing::floats(got["losses"][r]), testing::floats(want["losses"][r]), 44)
            .exact())
        << rank;
  }
  if (want.contains("test_correct")) {  // --dataset digits
    EXPECT_EQ(got.at("test_correct"), want["test_correct"]) << label << ": test predictions differ";
  }
}

TEST(Join, SimulatorIsBitwiseTorchJoin) {
  const json configs = testing::load_json("tests/golden/join/configs.json");
  ASSERT_GE(configs.size(), 14u);
  for (const auto& [name, args] : configs.items()) {
    std::vector<std::string> cmd = {"sim/ddp_sim"};
    for (const auto& a : args) cmd.push_back(a.get<std::string>());
    const std::string out = testing::temp_dir() + "/sim.json";
    const auto r = run_dump(cmd, out);
    ASSERT_EQ(r.status, 0) << name << ": " << r.err;
    EXPECT_NE(r.out.find("uneven inputs: batches per rank and epoch"), std::string::npos) << r.out;
    expect_torch_bits(name + " ddp_sim", testing::load_json(out),
                      testing::load_json("tests/golden/join/" + name + ".json"));
  }
}

TEST(Join, GlooRanksAreBitwiseTorchJoin) {
  const json configs = testing::load_json("tests/golden/join/configs.json");
  for (const auto& [name, args] : configs.items()) {
    const size_t ws = name.back() - '0';
    std::vector<std::string> cmd = {"verify/ddp_verify", "--backend", "gloo", "--nproc", std::to_string(ws)};
    for (const auto& a : args) cmd.push_back(a.get<std::string>());
    const std::string out = testing::temp_dir() + "/verify.json";
    const auto r = run_dump(cmd, out);
    ASSERT_EQ(r.status, 0) << name << ": " << r.out << r.err;
    EXPECT_NE(r.out.find("verified: every rank"), std::string::npos) << r.out;
    expect_torch_bits(name + " gloo", testing::load_json(out),
                      testing::load_json("tests/golden/join/" + name + ".json"));
  }
}

// What the goldens teach, on torch's own numbers: the divisor matters; Join's final broadcast leaves every
// rank with the last joiner's parameters; and Join with even inputs still changes the buffers (DDP's buffer
// broadcast comes from the highest rank, not rank 0) but not the parameters (BatchNorm trains on batch stats).
TEST(Join, GoldensShowWhatJoinDoes) {
  const json initial = testing::load_json("tests/golden/join/cnn_join_ws3.json");
  const json active = testing::load_json("tests/golden/join/cnn_join_active_ws3.json");
  const auto bi = testing::print_bits("cnn ws3 join divide initial vs active, rank 0",
                                      testing::floats(initial["replicas"][0]["12.weight"]),
                                      testing::floats(active["replicas"][0]["12.weight"]), 52);
  EXPECT_LT(bi.equal, bi.total / 2) << "the divisor should change most of the last layer";
  for (const char* g : {"cnn_join_ws3", "mlp_join_ws3", "mlp_join_ws2"}) {
    const json j = testing::load_json(std::string("tests/golden/join/") + g + ".json");
    for (size_t r = 1; r < j["replicas"].size(); ++r)
      EXPECT_EQ(j["replicas"][r], j["replicas"][0]) << g << " rank " << r;
  }
  const json even = testing::load_json("tests/golden/join/cnn_join_even_ws3.json");
  const json plain = testing::load_json("tests/golden/models/cnn_sgd_ws3.json");
  EXPECT_EQ(even["replicas"][0], plain["replicas"][0]) << "Join with even inputs changed the parameters";
  const auto bb = testing::print_bits("cnn ws3 join (even) vs no join: rank 0 running_mean",
                                      testing::floats(even["buffers"][0]["1.running_mean"]),
                                      testing::floats(plain["buffers"][0]["1.running_mean"]), 52);
  EXPECT_FALSE(bb.exact()) << "buffers from rank 2 should differ from rank 0's";
}

// Without Join: ddp_sim stops with one line (exit 1); real Gloo ranks fail after --timeout, the short rank
// waiting instead of pairing its next collective with the others' all-reduce; nothing hangs.
TEST(Join, WithoutJoinOneLineNamesWhereTorchWouldBlock) {
  const auto sim = testing::run_command({"sim/ddp_sim", "--uneven", "1", "--quiet"});
  EXPECT_EQ(sim.status, 1) << sim.err;
  std::printf("ddp_sim: %s", sim.err.c_str());
  EXPECT_EQ(std::count(sim.err.begin(), sim.err.end(), '\n'), 1) << sim.err;
  for (const char* want :
       {"uneven inputs without Join: at epoch 0, batch 3 (0-based), rank 1 ran out of batches",
        "bucket 0's all-reduce (of 1: [layers.1.bias", "rank 0 blocks in it",
        "Timed out waiting <timeout>ms for recv operation to complete", "Connection closed by peer", "--join true"}) {
    EXPECT_NE(sim.err.find(want), std::string::npos) << want << "\n" << sim.err;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto real = testing::run_command(
      {"verify/ddp_verify", "--backend", "gloo", "--nproc", "3", "--uneven", "1", "--timeout", "1", "--quiet"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("ddp_verify (%.1f s): %s", s, real.err.c_str());
  EXPECT_EQ(real.status, 1) << real.err;
  EXPECT_LT(s, 10.0) << "timeout 1 s + blame window + the launcher's grace";
  for (const char* want : {"at epoch 0, batch 1 (0-based), rank 2 ran out of batches", "ranks 0,1 block in it",
                           "here: rank 0: step 1: bucket 0's all-reduce (all_reduce #", "Timed out waiting 1000ms"}) {
    EXPECT_NE(real.err.find(want), std::string::npos) << want << "\n" << real.err;
  }
}

TEST(Join, BadInputGetsOneLineAndExit2) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--uneven", "4"},
       "--uneven 4 leaves rank 1 with 4 - 4*1 = 0 of its 4 batches per epoch: every rank needs one "
       "(at most --uneven 3 at --world-size 2)"},
      {{"--uneven", "-1"}, "--uneven must be in"},
      {{"--join-divide", "active"}, "--join-divide active takes effect only with --join true"},
      {{"--join-divide", "half"}, "--join-divide"},
      {{"--uneven", "1", "--no-sync", "2"}, "--uneven and --join are modelled with --no-sync 1 only"},
      {{"--join", "true", "--average", "postdivide"}, "--join follows DDP's predivide"},
      {{"--join-scope", "run"}, "--join-scope run takes effect only with --join true"},
      {{"--join", "true", "--join-scope", "run", "--no-sync", "2"}, "--join-scope run pairs each rank's all-reduces"},
      {{"--join", "true", "--find-unused-parameters", "true"}, "--join with --find-unused-parameters true is not modelled"},
      {{"--model", "gpt", "--uneven", "4"}, "--uneven 4 leaves rank 1 with 4 - 4*1 = 0"},
  };
  for (const auto& [args, want] : cases) {
    std::vector<std::string> cmd = {"sim/ddp_sim"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    const auto r = testing::run_command(cmd);
    EXPECT_EQ(r.status, 2) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const auto nccl = testing::run_command(
      {"verify/ddp_verify", "--backend", "nccl", "--compute", "device", "--nproc", "2", "--uneven", "1"});
  EXPECT_EQ(nccl.status, 2) << nccl.err;  // the device trainer has no Join; --compute host runs it
  EXPECT_NE(nccl.err.find("--compute device has no Join"), std::string::npos) << nccl.err;
}

}  // namespace
}  // namespace ddplab
