// The simulator's nccl-ring: NCCL 2.28's ring all-reduce as read from its source (src/device/all_reduce.h
// runRing, enqueue.cc's chunking), pinned to one ring, one channel, the Simple protocol. Expected values
// here are worked out by hand from that reading (nccl_ring.h); the end-to-end check against real NCCL is
// tests/nccl_test.cc, which needs a GPU.
#include <gtest/gtest.h>

#include "src/collective/allreduce.h"
#include "src/collective/nccl_ring.h"

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
  EXPECT_EQ(spans(37, 2, 8), (std::vector<Span>{{0, 8, 1}, {8, 16, 0}, {16, 24, 1}, {24, 32, 0}, {32, 36, 1}, {36, 37, 0}}));
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

}  // namespace
}  // namespace ddplab::collective
