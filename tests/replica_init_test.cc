// The simulator draws a model's initialisation once and copies it to every rank seeded alike
// (Replica(cfg, rank, like), src/ddp/trainer.h). Each rank built that way must be the rank built by
// drawing (Replica(cfg, rank)): the same parameters and buffers, the same generator state (so the same
// DataLoader draws and Dropout masks later), the same first step. And a rank seeded per rank must not be.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "src/ddp/config.h"
#include "src/ddp/trainer.h"
#include "src/base/flags.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

ddp::Config config(const std::vector<std::string>& args) {
  std::vector<std::string> storage = {"replica_init_test"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  const Flags flags(static_cast<int>(storage.size()), argv.data(), ddp::config_flag_names());
  return ddp::config_from_flags(flags);
}

std::vector<float> values(const Matrix& m) { return std::vector<float>(m.data(), m.data() + m.size()); }

// Parameters and buffers, bitwise: returns how many floats differ (each tensor's match line printed).
int64_t differing(const std::string& label, const Module& got, const Module& want) {
  int64_t diff = 0;
  const auto gp = got.parameters(), wp = want.parameters();
  EXPECT_EQ(gp.size(), wp.size()) << label;
  for (size_t i = 0; i < gp.size() && i < wp.size(); ++i) {
    EXPECT_EQ(gp[i]->name, wp[i]->name) << label;
    const auto m = testing::match(label + " " + gp[i]->name, values(gp[i]->value), values(wp[i]->value), 0, 0);
    diff += m.total - m.equal;
  }
  const auto gb = got.buffers(), wb = want.buffers();
  EXPECT_EQ(gb.size(), wb.size()) << label;
  for (size_t i = 0; i < gb.size() && i < wb.size(); ++i) {
    const auto m = testing::match(label + " " + gb[i]->name, values(gb[i]->value), values(wb[i]->value), 0, 0);
    diff += m.total - m.equal + (gb[i]->count != wb[i]->count ? 1 : 0);
  }
  return diff;
}

// From here on both replicas must behave alike: DDP(model) (broadcast from `rank0`, the seed_per_rank
// reseed), the epoch's batches, one forward and backward (Dropout's masks), the generator's next words.
void expect_same_future(const std::string& label, const ddp::Config& cfg, const Dataset& data, ddp::Replica& rank0,
                        ddp::Replica& copied, ddp::Replica& drawn) {
  const auto broadcast = [&](ddp::TrainingRank& t) {
    auto& r = static_cast<ddp::Replica&>(t);
    if (&r == &rank0) return;
    const auto src = rank0.model.parameters();
    const auto dst = r.model.parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i]->value = src[i]->value;
    ddp::copy_buffers(rank0.model, r.model);
  };
  ddp::init_ddp(cfg, copied, broadcast);
  ddp::init_ddp(cfg, drawn, broadcast);
  const auto batches_c = copied.loader.iter(), batches_d = drawn.loader.iter();
  ASSERT_EQ(batches_c, batches_d) << label << ": the DataLoader's batches differ";
  const float loss_c = copied.forward_backward(data, batches_c[0]);
  const float loss_d = drawn.forward_backward(data, batches_d[0]);
  EXPECT_EQ(loss_c, loss_d) << label << ": first loss";
  const auto gc = copied.model.parameters(), gd = drawn.model.parameters();
  int64_t grad_diff = 0;
  for (size_t i = 0; i < gc.size(); ++i) {
    const auto m = testing::match(label + " grad " + gc[i]->name, values(gc[i]->grad), values(gd[i]->grad), 0, 0);
    grad_diff += m.total - m.equal;
  }
  EXPECT_EQ(grad_diff, 0) << label << ": first step's gradients";
  int64_t words_diff = 0;
  for (int i = 0; i < 2000; ++i) words_diff += copied.gen.random() != drawn.gen.random() ? 1 : 0;
  EXPECT_EQ(words_diff, 0) << label << ": the generators' next 2000 words";
}

TEST(ReplicaInit, CopiedRanksAreDrawnRanks) {
  const std::vector<std::vector<std::string>> cases = {
      {"--world-size", "3", "--layers", "6,4,2"},
      {"--world-size", "3", "--layers", "8,16,4", "--activation", "relu", "--init", "continue", "--dataset", "rand"},
      {"--world-size", "3", "--model", "cnn", "--dataset", "digits", "--loss", "ce", "--momentum", "0.9",
       "--batch-size", "16"},
      {"--world-size", "3", "--model", "cnn", "--dataset", "digits", "--loss", "ce", "--batch-size", "16",
       "--seed-per-rank", "true", "--seed", "7"},
      {"--world-size", "2", "--model", "linear(6,5),relu,dropout(0.5),linear(5,2)", "--optimizer", "adam"},
  };
  for (const auto& args : cases) {
    const ddp::Config cfg = config(args);
    std::string label =
        args[2] + " " + args[3] + (cfg.seed_per_rank ? " seed-per-rank" : "") + " init " + ddp::init_name(cfg.init);
    ASSERT_TRUE(ddp::draws_alike(cfg)) << label;
    Generator data_gen;
    const Dataset data = ddp::make_dataset(cfg, data_gen);
    ddp::Replica rank0(cfg, 0);
    // The single device is a copy of rank 0 too.
    for (int64_t r = 0; r < cfg.world_size; ++r) {
      const std::string l = label + " rank " + std::to_string(r);
      ddp::Replica copied(cfg, r, rank0);
      ddp::Replica drawn(cfg, r);
      EXPECT_EQ(differing(l, copied.model, drawn.model), 0) << l;
      expect_same_future(l, cfg, data, rank0, copied, drawn);
    }
  }
}

// --init per-rank: each rank draws from its own seed, so a copy of rank 0 would be wrong; the simulator
// draws those ranks (side by side). The test shows the difference is real.
TEST(ReplicaInit, PerRankSeedsDrawTheirOwn) {
  const ddp::Config cfg = config({"--world-size", "2", "--layers", "6,4,2", "--init", "per-rank"});
  EXPECT_FALSE(ddp::draws_alike(cfg));
  ddp::Replica rank0(cfg, 0);
  ddp::Replica copied(cfg, 1, rank0);
  ddp::Replica drawn(cfg, 1);
  EXPECT_GT(differing("per-rank rank 1 (copy vs drawn)", copied.model, drawn.model), 0);
}

}  // namespace
}  // namespace ddplab
