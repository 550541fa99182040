// DistributedSampler and DataLoader index lists against PyTorch's (tests/golden/sampler.json).
#include "src/data/data.h"

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

TEST(DistributedSampler, IndicesMatchPyTorchOverTheGrid) {
  const auto g = testing::load_json("tests/golden/sampler.json");
  int checked = 0;
  for (const auto& c : g["distributed_sampler"]) {
    const int64_t r = c["num_replicas"];
    for (int64_t rank = 0; rank < r; ++rank) {
      DistributedSampler s(c["n"], r, rank, c["shuffle"], c["seed"], c["drop_last"]);
      s.set_epoch(c["epoch"]);
      const auto want = testing::ints(c["ranks"][static_cast<size_t>(rank)]);
      EXPECT_EQ(s.indices(), want) << c.dump().substr(0, 120) << " rank " << rank;
      EXPECT_EQ(s.num_samples(), static_cast<int64_t>(want.size()));
      ++checked;
    }
  }
  std::printf("DistributedSampler: %d (config, rank) index lists compared\n", checked);
  EXPECT_GT(checked, 400);
}

TEST(DistributedSampler, SetEpochReshuffles) {
  DistributedSampler s(100, 2, 0);
  const auto e0 = s.indices();
  s.set_epoch(1);
  EXPECT_NE(s.indices(), e0);
  s.set_epoch(0);
  EXPECT_EQ(s.indices(), e0);
}

TEST(DataLoader, ShuffledEpochsDrawLikePyTorch) {
  const auto g = testing::load_json("tests/golden/sampler.json");
  for (const auto& c : g["shuffled_loader"]) {
    manual_seed(c["seed"]);
    DataLoader dl(c["n"], c["batch_size"], /*shuffle=*/true, c["drop_last"]);
    for (const auto& epoch : c["epochs"]) {
      const auto batches = dl.iter();
      ASSERT_EQ(batches.size(), epoch.size());
      for (size_t b = 0; b < batches.size(); ++b) EXPECT_EQ(batches[b], testing::ints(epoch[b]));
    }
    // The global generator must be exactly where PyTorch left it: two int64 draws per epoch.
    const auto m = testing::match("randn(3) after 3 shuffled epochs", default_generator().randn(3),
                                  testing::floats(c["randn3_after"]));
    EXPECT_EQ(m.equal, m.total);
  }
}

TEST(DataLoader, LengthAndLastBatch) {
  DataLoader keep(10, 4, false, false), drop(10, 4, false, true);
  EXPECT_EQ(keep.len(), 3);
  EXPECT_EQ(drop.len(), 2);
  EXPECT_EQ(keep.iter().back(), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(drop.iter().size(), 2u);
}

TEST(DataLoader, FollowsItsDistributedSamplerEpoch) {
  DistributedSampler s(20, 2, 1, true, 0, false);
  DataLoader dl(s, 5);
  const auto e0 = dl.iter();
  s.set_epoch(3);
  const auto e3 = dl.iter();
  EXPECT_NE(e0, e3);
  const auto idx = s.indices();
  EXPECT_EQ(e3[0], std::vector<int64_t>(idx.begin(), idx.begin() + 5));
}

}  // namespace
}  // namespace ddplab

// A machine whose sklearn is not Debian's (the GPU bundle's) names the digits in DDPLAB_DIGITS.
TEST(Digits, DefaultPathIsDdplabDigitsWhenSet) {
  unsetenv("DDPLAB_DIGITS");
  EXPECT_EQ(ddplab::digits_default_path(), ddplab::kDigitsDefaultPath);
  setenv("DDPLAB_DIGITS", "/nonexistent/digits.csv.gz", 1);
  EXPECT_EQ(ddplab::digits_default_path(), "/nonexistent/digits.csv.gz");
  try {
    ddplab::load_digits(ddplab::digits_default_path());
    ADD_FAILURE() << "no error for a missing file";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/digits.csv.gz: cannot open"), std::string::npos) << e.what();
  }
  unsetenv("DDPLAB_DIGITS");
}
