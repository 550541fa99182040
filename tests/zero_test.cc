// --zero true (torch.distributed.optim.ZeroRedundancyOptimizer, src/ddp/zero.h) against torch 1.13's own runs:
// tests/golden/models/zero_*.json, written by make_model_goldens.py from sim/ddp_reference.py --zero true (real
// DDP + ZeroRedundancyOptimizer on gloo). Checked: the partition (names per rank) that torch computed, every
// rank's optimizer-state floats, and every rank's parameters and losses bit for bit, in the simulator and with
// real Gloo ranks (ddp_verify). The kernels are pinned in tests/BUILD as the generator pins them.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "src/ddp/config.h"
#include "src/ddp/trainer.h"
#include "src/ddp/zero.h"
#include "src/base/flags.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::json;

// The zero_* configs of the model goldens: name -> argument list.
std::vector<std::pair<std::string, std::vector<std::string>>> zero_configs() {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  const json configs = testing::load_json("tests/golden/models/configs.json");
  for (const auto& [name, args] : configs.items()) {
    if (name.rfind("zero_", 0) == 0) out.emplace_back(name, args.get<std::vector<std::string>>());
  }
  return out;
}

ddp::Config config_of(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"zero_test"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> ptrs;
  for (auto& a : argv) ptrs.push_back(a.data());
  const Flags flags(static_cast<int>(ptrs.size()), ptrs.data(), ddp::config_flag_names());
  ddp::Config cfg = ddp::config_from_flags(flags);
  cfg.threads = 1;
  return cfg;
}

std::vector<std::vector<std::string>> partition_names(const std::vector<Parameter*>& params,
                                                      const std::vector<std::vector<size_t>>& partition) {
  std::vector<std::vector<std::string>> names(partition.size());
  for (size_t r = 0; r < partition.size(); ++r) {
    for (size_t i : partition[r]) names[r].push_back(params[i]->name);
  }
  return names;
}

TEST(Zero, PartitionIsTorchs) {
  const auto configs = zero_configs();
  ASSERT_EQ(configs.size(), 8u) << "MLP and CNN, SGD and Adam, world sizes 2 and 3";
  for (const auto& [name, args] : configs) {
    const ddp::Config cfg = config_of(args);
    Generator gen;
    Sequential model = ddp::make_model(cfg, 0, gen);
    std::vector<int64_t> numels;
    for (const Parameter* p : model.parameters()) numels.push_back(p->numel());
    const auto got = partition_names(model.parameters(), ddp::zero_partition(numels, cfg.world_size));
    const json torch = testing::load_json("tests/golden/models/" + name + ".json")["zero"]["partition"];
    EXPECT_EQ(json(got), torch) << name;
    std::printf("%-20s partition = torch's: %s\n", name.c_str(), json(got) == torch ? "yes" : "NO");
  }
}

// The simulator with --zero true: torch's bits on every rank, torch's optimizer state per rank; and the same
// bits as plain DDP (ZeRO changes where the state lives, not the arithmetic), whose every rank holds the sum.
TEST(Zero, SimulatorIsTorchsZeroAndPlainDdpsBits) {
  for (const auto& [name, args] : zero_configs()) {
    const json torch = testing::load_json("tests/golden/models/" + name + ".json");
    ddp::Config cfg = config_of(args);
    ASSERT_TRUE(cfg.zero) << name;
    const ddp::SimResult zero = ddp::simulate(cfg, false);
    ddp::Config plain_cfg = cfg;
    plain_cfg.zero = false;
    const ddp::SimResult plain = ddp::simulate(plain_cfg, false);
    std::vector<int64_t> state;
    for (size_t r = 0; r < zero.replicas.size(); ++r) {
      const std::string label = name + " rank" + std::to_string(r);
      state.push_back(zero.replicas[r]->optimizer->state_numel());
      int64_t equal = 0, total = 0, plain_equal = 0;
      for (const Parameter* p : std::as_const(zero.replicas[r]->model).parameters()) {
        const auto want = testing::floats(torch["replicas"][r][p->name]);
        const std::vector<float> got(p->data(), p->data() + p->numel());
        const testing::Bits b = testing::bits(got, want);
        equal += b.equal;
        total += b.total;
        EXPECT_TRUE(b.exact()) << label << " " << p->name << ": " << b.equal << "/" << b.total << ", max ulps "
                               << b.worst;
      }
      for (const Parameter* p : std::as_const(plain.replicas[r]->model).parameters()) {
        plain_equal += testing::bits(std::vector<float>(p->data(), p->data() + p->numel()),
                                     testing::floats(torch["replicas"][r][p->name]))
                           .equal;
      }
      EXPECT_EQ(plain_equal, total) << label << ": plain DDP's bits are not ZeRO's";
      std::vector<float> losses;
      for (const auto& l : zero.log) {
        if (l.rank == static_cast<int64_t>(r)) losses.push_back(l.loss);
      }
      const testing::Bits lb = testing::bits(losses, testing::floats(torch["losses"][r]));
      EXPECT_TRUE(lb.exact()) << label << " losses: " << lb.equal << "/" << lb.total;
      std::printf("%-26s parameters %lld/%lld bitwise torch's (plain DDP: %lld), losses %lld/%lld\n", label.c_str(),
                  static_cast<long long>(equal), static_cast<long long>(total), static_cast<long long>(plain_equal),
                  static_cast<long long>(lb.equal), static_cast<long long>(lb.total));
    }
    EXPECT_EQ(json(state), torch["zero"]["state_numel"]) << name;
    const int64_t sum = std::accumulate(state.begin(), state.end(), int64_t{0});
    for (const auto& rep : plain.replicas) EXPECT_EQ(rep->optimizer->state_numel(), sum) << name;
    std::printf("%-20s state per rank %s = torch's; plain DDP %lld on every rank\n", name.c_str(),
                json(state).dump().c_str(), static_cast<long long>(sum));
  }
}

// Real ranks over Gloo: each steps its shard and broadcasts it (Communicator::broadcast); parameters and losses
// are torch's bits, the dump is ddp_sim's, and the block shows torch's state per rank.
TEST(Zero, GlooRanksAreTorchsBits) {
  for (const auto& [name, args] : zero_configs()) {
    const json torch = testing::load_json("tests/golden/models/" + name + ".json");
    const size_t ws = torch["replicas"].size();
    std::vector<std::string> cmd = {"verify/ddp_verify", "--backend", "gloo", "--nproc", std::to_string(ws), "--quiet"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    const std::string out = testing::temp_dir() + "/verify.json";
    cmd.insert(cmd.end(), {"--dump-params", out});
    const testing::CommandResult r = testing::run_command(cmd);
    ASSERT_EQ(r.status, 0) << name << ": " << r.out << r.err;
    EXPECT_NE(r.out.find("verified: every rank"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("the simulator's ranks hold the same state per rank: true"), std::string::npos) << r.out;
    const json got = testing::load_json(out);
    for (size_t rank = 0; rank < ws; ++rank) {
      const std::string label = name + " gloo rank" + std::to_string(rank);
      int64_t equal = 0, total = 0;
      for (const auto& [pname, want] : torch["replicas"][rank].items()) {
        const testing::Bits b = testing::bits(testing::floats(got["replicas"][rank][pname]), testing::floats(want));
        equal += b.equal;
        total += b.total;
        EXPECT_TRUE(b.exact()) << label << " " << pname << ": max ulps " << b.worst;
      }
      EXPECT_EQ(got["losses"][rank], torch["losses"][rank]) << label;
      const int64_t state = torch["zero"]["state_numel"][rank].get<int64_t>();
      EXPECT_NE(r.out.find("rank " + std::to_string(rank) + ": state " + std::to_string(state) + " ("),
                std::string::npos)
          << label << "\n"
          << r.out;
      std::printf("%-28s parameters %lld/%lld bitwise torch's, state %lld floats as torch's\n", label.c_str(),
                  static_cast<long long>(equal), static_cast<long long>(total), static_cast<long long>(state));
    }
  }
}

TEST(Zero, UnsupportedCombinationsGetOneLineAndExit2) {
  const auto nccl =
      testing::run_command({"verify/ddp_verify", "--backend", "nccl", "--compute", "device", "--nproc", "2", "--zero",
                            "true", "--quiet"});
  EXPECT_EQ(nccl.status, 2) << nccl.err;  // the device trainer has no sharded optimizer; --compute host runs it
  EXPECT_NE(nccl.err.find("--compute device has no ZeroRedundancyOptimizer (--zero true)"), std::string::npos)
      << nccl.err;
  const auto bad = testing::run_command({"sim/ddp_sim", "--zero", "maybe", "--quiet"});
  EXPECT_EQ(bad.status, 2) << bad.err;
  EXPECT_NE(bad.err.find("--zero"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace ddplab
