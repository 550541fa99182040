// The simulator's nccl-ring: NCCL 2.28's ring all-reduce as read from its source (src/device/all_reduce.h
// runRing, enqueue.cc's chunking), pinned to one ring, one channel, the Simple protocol. The first tests
// work expected values out by hand from that reading (nccl_ring.h); the last checks the simulator against
// what real NCCL did on an H100 (tests/golden/nccl/, recorded by verify/nccl_order), so the order is
// checked here without a GPU. tests/nccl_test.cc checks whole DDP runs where a GPU exists.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "src/collective/allreduce.h"
#include "src/collective/nccl_ring.h"
#include "src/base/io.h"
#include "src/data/torch_rng.h"
#include "tests/testing.h"

namespace ddplab::collective {
namespace {

struct Span {
  size_t begin, end, first;
  bool operator==(const Span& o) const { return begin == o.begin && end == o.end && first == o.first; }
};
std::vector<Span> spans(size_t n, size_t ws, size_t chunk) {
  std::vector<Span> out;
  for (const NcclChunk& c : nccl_ring_chunks(n, ws, chunk)) {
    EXPECT_EQ(c.owner, (c.first + ws - 1) % ws) << "the chunk's sum ends one position before it starts";
    out.push_back({c.begin, c.end, c.first});
  }
  return out;
}

TEST(NcclRing, ChunksOfAShortBufferAre16ByteAligned) {
  // 10 floats, 3 ranks: one loop shorter than 3 * C, so C' = roundUp(ceil(10 / 3), 4) = 4.
  EXPECT_EQ(spans(10, 3, 1024), (std::vector<Span>{{0, 4, 1}, {4, 8, 2}, {8, 10, 0}}));
  // One float, 4 ranks: chunk 0 only; its sum starts at position 1.
  EXPECT_EQ(spans(1, 4, 1024), (std::vector<Span>{{0, 1, 1}}));
  // 12 floats, 2 ranks: C' = 8, chunk 1 gets the last 4.
  EXPECT_EQ(spans(12, 2, 1024), (std::vector<Span>{{0, 8, 1}, {8, 12, 0}}));
}

TEST(NcclRing, LongBuffersRunFullLoopsThenAShortOne) {
  // C = 8, 2 ranks: loops of 16; 37 = 16 + 16 + 5, and the last loop has C' = roundUp(3, 4) = 4.
  EXPECT_EQ(spans(37, 2, 8),
            (std::vector<Span>{{0, 8, 1}, {8, 16, 0}, {16, 24, 1}, {24, 32, 0}, {32, 36, 1}, {36, 37, 0}}));
  // Exactly two full loops: no short loop after them.
  EXPECT_EQ(spans(32, 2, 8).size(), 4u);
  // The pinned configuration's chunk: 2 MiB of floats (NCCL_BUFFSIZE 4 MiB / 8 steps * 4 chunk steps).
  EXPECT_EQ(nccl_ring_chunk_elems(), size_t{1} << 19);
}

TEST(NcclRing, ChunksCoverTheBufferOnce) {
  for (size_t ws = 1; ws <= 8; ++ws) {
    for (size_t n : {1, 3, 4, 17, 1000, 4097}) {
      size_t next = 0;
      for (const Span& s : spans(n, ws, 64)) {
        EXPECT_EQ(s.begin, next) << "ws=" << ws << " n=" << n;
        next = s.end;
      }
      EXPECT_EQ(next, n) << "ws=" << ws << " n=" << n;
    }
  }
}

TEST(NcclRing, EachChunkIsSummedFromThePositionAfterItsOwner) {
  // 3 ranks, 12 floats: chunks [0,4) [4,8) [8,12) start at positions 1, 2, 0. With x = 1, 1e8, -1e8:
  //   chunk 0: (x1 + x2) + x0 = (1e8 - 1e8) + 1   = 1
  //   chunk 1: (x2 + x0) + x1 = (-1e8 + 1) + 1e8  = 0   (-1e8 + 1 rounds back to -1e8: floats there are 8 apart)
  //   chunk 2: (x0 + x1) + x2 = (1 + 1e8) - 1e8   = 0
  std::vector<std::vector<float>> d = {std::vector<float>(12, 1.0f), std::vector<float>(12, 1e8f),
                                       std::vector<float>(12, -1e8f)};
  std::vector<float*> p = {d[0].data(), d[1].data(), d[2].data()};
  allreduce_sum(Algorithm::nccl_ring, p, 12);
  const std::vector<float> want = {1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(d[r], want) << "rank " << r;
}

TEST(NcclRing, TheFirstTwoAddendsAreThePositionsAfterTheOwner) {
  // For every world size and chunk: +2^30 at position c+1, -2^30 at c+2, 1 elsewhere. Added first, the
  // big pair cancels exactly and the ones survive (sum N-2); added in any other order, a 1 meets 2^30
  // (where floats are 128 apart) and is lost.
  for (size_t ws = 2; ws <= 8; ++ws) {
    const size_t n = 4 * ws;  // one loop, chunk c = elements [4c, 4c + 4)
    std::vector<std::vector<float>> d(ws, std::vector<float>(n, 1.0f));
    for (size_t c = 0; c < ws; ++c) {
      for (size_t i = 4 * c; i < 4 * c + 4; ++i) {
        d[(c + 1) % ws][i] = 1073741824.0f;
        d[(c + 2) % ws][i] = -1073741824.0f;  // with 2 ranks, c + 2 is c itself: the pair is the whole sum
      }
    }
    std::vector<float*> p;
    for (auto& v : d) p.push_back(v.data());
    allreduce_sum(Algorithm::nccl_ring, p, n);
    for (size_t r = 0; r < ws; ++r) {
      EXPECT_EQ(d[r], std::vector<float>(n, static_cast<float>(ws - 2))) << "ws=" << ws << " rank " << r;
    }
  }
}

TEST(NcclRing, EqualsRealNcclRecordedOnAGpu) {
  // Per world size and buffer size, real NCCL gave: which rank each element's sum starts at (as runs,
  // found by probes; none for 2 ranks, where every order gives the same bits) and the FNV-1a hash of the
  // sum of seeded randn inputs (rank r: manual_seed(seed + r)). Every bit of that sum depends on the order.
  for (int ws = 2; ws <= 8; ++ws) {
    const auto g = testing::load_json("tests/golden/nccl/ws" + std::to_string(ws) + ".json");
    ASSERT_EQ(g["world_size"].get<int>(), ws);
    for (const auto& c : g["cases"]) {
      const size_t n = c["n"].get<size_t>();
      const std::string label = "ws=" + std::to_string(ws) + " n=" + std::to_string(n);
      size_t spans_checked = 0;
      if (!c["spans"].is_null()) {
        const auto want = c["spans"].get<std::vector<std::vector<int64_t>>>();
        const auto got = nccl_ring_chunks(n, static_cast<size_t>(ws));
        ASSERT_EQ(got.size(), want.size()) << label;
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_EQ(static_cast<int64_t>(got[i].begin), want[i][0]) << label << " chunk " << i;
          EXPECT_EQ(static_cast<int64_t>(got[i].end), want[i][1]) << label << " chunk " << i;
          EXPECT_EQ(static_cast<int64_t>(got[i].first), want[i][2]) << label << " chunk " << i;
        }
        spans_checked = want.size();
      }
      std::vector<std::vector<float>> x;
      std::vector<float*> p;
      for (int r = 0; r < ws; ++r) {
        Generator gen(c["seed"].get<uint64_t>() + static_cast<uint64_t>(r));
        x.push_back(gen.randn(static_cast<int64_t>(n)));
      }
      // How many elements rank order (the naive algorithm) would get wrong: shows the check can fail.
      std::vector<std::vector<float>> y = x;
      for (auto& v : y) p.push_back(v.data());
      allreduce_sum(Algorithm::naive, p, n);
      p.clear();
      for (auto& v : x) p.push_back(v.data());
      allreduce_sum(Algorithm::nccl_ring, p, n);
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i) differ += x[0][i] != y[0][i];
      char hash[17];
      std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a_bits(x[0].data(), n)));
      EXPECT_EQ(hash, c["sum_fnv1a"].get<std::string>()) << label;
      std::printf(
          "%-18s nccl-ring vs real NCCL %s: %zu chunk starts %s, sum hash %s (rank order differs in %zu of %zu)\n",
          label.c_str(), g["nccl_version"].get<std::string>().c_str(), spans_checked,
          spans_checked ? "equal" : "(none for 2 ranks)",
          std::string(hash) == c["sum_fnv1a"].get<std::string>() ? "equal" : "DIFFERS", differ, n);
    }
  }
}

}  // namespace
}  // namespace ddplab::collective
