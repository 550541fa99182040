// Issue 42's first piece: FSDP2's reduce-scatter (src/collective/fsdp.h) predicted from every rank's unsharded
// local gradients, against real torch 2.x `fully_shard` over Gloo (tests/fsdp/capture_fsdp2.py) at 2, 3 and 4
// ranks, every rank's every shard bit for bit. And where the model can fail: DDP's arithmetic (each gradient
// times 1/world_size, then summed) in the same order gives other bits from 3 ranks on.
#include "src/collective/fsdp.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab::collective {
namespace {

using testing::json;

std::string torch2_python() {
  const char* venv = std::getenv("DDPLAB_TORCH2_VENV");
  return std::string(venv && *venv ? venv : "/opt/ddplab-torch2") + "/bin/python";
}

TEST(FsdpReduce, ShardRowsAsFullyShardCutsThem) {
  EXPECT_EQ(fsdp_shard_rows(33, 4, 0).begin, 0);
  EXPECT_EQ(fsdp_shard_rows(33, 4, 3).begin, 27);
  EXPECT_EQ(fsdp_shard_rows(33, 4, 3).end, 33);  // 9, 9, 9, 6
  EXPECT_EQ(fsdp_shard_rows(5, 4, 3).begin, fsdp_shard_rows(5, 4, 3).end);  // 2, 2, 1, 0: an empty shard
}

TEST(FsdpReduce, ShardedGradientsAreTorchsBitForBit) {
  const std::string py = torch2_python();
  if (testing::run_command({py, "-c", "from torch.distributed.fsdp import fully_shard"}).status != 0)
    GTEST_SKIP() << py << " has no torch with fully_shard (tools/install_deps.sh --with-torch2)";
  for (int ws : {2, 3, 4}) {
    const std::string out = testing::temp_dir() + "/fsdp" + std::to_string(ws) + ".json";
    const auto r = testing::run_command({"/usr/bin/timeout", "300", py, "tests/fsdp/capture_fsdp2.py",
                                         std::to_string(ws), out});
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = testing::load_json(out);
    const size_t groups = j["ranks"][0].size();
    int64_t equal = 0, total = 0, ddp_equal = 0;
    for (size_t g = 0; g < groups; ++g) {
      std::vector<std::vector<int64_t>> shapes;
      std::vector<std::vector<std::vector<float>>> local(static_cast<size_t>(ws));
      for (const json& p : j["ranks"][0][g]) shapes.push_back(p["shape"].get<std::vector<int64_t>>());
      std::vector<std::vector<const float*>> ptrs(static_cast<size_t>(ws));
      for (int k = 0; k < ws; ++k) {
        for (const json& p : j["ranks"][k][g]) local[static_cast<size_t>(k)].push_back(testing::floats(p["local"]));
        for (const auto& v : local[static_cast<size_t>(k)]) ptrs[static_cast<size_t>(k)].push_back(v.data());
      }
      const auto got = fsdp_reduce_scatter(shapes, ptrs);
      // DDP's arithmetic in the same order: each local gradient times float(1/ws), summed, not divided after.
      std::vector<std::vector<std::vector<float>>> pre = local;
      const float inv = 1.0f / static_cast<float>(ws);
      for (auto& rank : pre)
        for (auto& v : rank)
          for (float& x : v) x = x * inv;
      std::vector<std::vector<const float*>> pre_ptrs(static_cast<size_t>(ws));
      for (int k = 0; k < ws; ++k)
        for (const auto& v : pre[static_cast<size_t>(k)]) pre_ptrs[static_cast<size_t>(k)].push_back(v.data());
      const auto ddp_like = fsdp_reduce_scatter(shapes, pre_ptrs, 1.0f);  // a plain sum of the pre-divided
      for (int k = 0; k < ws; ++k) {
        for (size_t i = 0; i < shapes.size(); ++i) {
          const json& p = j["ranks"][k][g][i];
          const std::vector<float> want = testing::floats(p["shard"]);
          const auto& mine = got[static_cast<size_t>(k)][i];
          ASSERT_EQ(mine.size(), want.size()) << "ws " << ws << " rank " << k << " " << p["name"];
          for (size_t e = 0; e < want.size(); ++e) {
            equal += mine[e] == want[e];
            ddp_equal += ddp_like[static_cast<size_t>(k)][i][e] == want[e];
          }
          total += static_cast<int64_t>(want.size());
          EXPECT_EQ(mine, want) << "ws " << ws << " rank " << k << " " << p["name"].get<std::string>();
        }
      }
    }
    std::printf("world size %d (%s): %lld/%lld sharded gradient floats bitwise torch's; DDP's 1/ws-then-sum "
                "arithmetic in the same order: %lld/%lld\n",
                ws, j["torch"].get<std::string>().c_str(), static_cast<long long>(equal), static_cast<long long>(total),
                static_cast<long long>(ddp_equal), static_cast<long long>(total));
    if (ws == 3) {
      EXPECT_LT(ddp_equal, total) << "at 3 ranks the division after the sum must make a difference";
    }
  }
}

}  // namespace
}  // namespace ddplab::collective
