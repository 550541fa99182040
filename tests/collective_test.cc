// The in-process all-reduce algorithms: correct (inputs whose sums are exact in any order, as nccl-tests
// checks), which of them agree bitwise on ordinary data, and the ring against Debian's real Gloo.
#include <cstring>
#include <thread>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <gtest/gtest.h>

#include "src/collective/allreduce.h"
#include "src/collective/ring.h"
#include "src/base/parallel.h"
#include "src/data/torch_rng.h"

namespace ddplab::collective {
namespace {

using Data = std::vector<std::vector<float>>;

Data random_data(size_t ws, size_t n, uint64_t seed) {
  Generator g(seed);
  Data d;
  for (size_t r = 0; r < ws; ++r) d.push_back(g.randn(static_cast<int64_t>(n)));
  return d;
}

Data run(Algorithm a, Data d) {
  std::vector<float*> ptrs;
  for (auto& v : d) ptrs.push_back(v.data());
  allreduce_sum(a, ptrs, d[0].size());
  return d;
}

TEST(Allreduce, ExactSumsInAnyOrderWithWrongCount) {
  // Small integers times a power of two: every partial sum is exact, so every algorithm must give the
  // mathematically exact result on every rank. #wrong counts elements that are not.
  for (size_t ws : {1, 2, 3, 4, 5, 7, 8, 9, 16}) {
    for (size_t n : {1, 2, 7, 64, 1000, 4099}) {
      Data d(ws, std::vector<float>(n));
      std::vector<float> want(n, 0.0f);
      for (size_t r = 0; r < ws; ++r) {
        for (size_t i = 0; i < n; ++i) {
          d[r][i] = static_cast<float>(static_cast<int>((r * 7919 + i * 104729) % 17) - 8) * 0.25f;
          want[i] += d[r][i];
        }
      }
      for (const std::string& name : algorithm_names()) {
        const Data out = run(parse_algorithm(name), d);
        size_t wrong = 0;
        for (size_t r = 0; r < ws; ++r) {
          for (size_t i = 0; i < n; ++i) wrong += out[r][i] != want[i];
        }
        EXPECT_EQ(wrong, 0u) << name << " ws=" << ws << " n=" << n;
      }
    }
  }
}

TEST(Allreduce, EveryRankEndsWithTheSameBits) {
  for (size_t ws : {2, 3, 5, 8}) {
    for (const std::string& name : algorithm_names()) {
      const Data out = run(parse_algorithm(name), random_data(ws, 333, 11));
      for (size_t r = 1; r < ws; ++r) EXPECT_EQ(out[r], out[0]) << name << " ws=" << ws << " rank " << r;
    }
  }
}

TEST(Allreduce, WhichAlgorithmsAgreeBitwiseOnOrdinaryData) {
  const auto& names = algorithm_names();
  for (size_t ws : {2, 3, 4, 5, 8}) {
    const Data d = random_data(ws, 1000, 1234 + ws);
    std::vector<Data> out;
    for (const std::string& name : names) out.push_back(run(parse_algorithm(name), d));
    std::printf("ws=%zu: elements (of 1000) whose bits differ\n%18s", ws, "");
    for (const auto& n : names) std::printf("%18s", n.c_str());
    std::printf("\n");
    std::vector<std::vector<size_t>> differ(names.size(), std::vector<size_t>(names.size()));
    for (size_t a = 0; a < names.size(); ++a) {
      std::printf("%18s", names[a].c_str());
      for (size_t b = 0; b < names.size(); ++b) {
        for (size_t i = 0; i < 1000; ++i) differ[a][b] += out[a][0][i] != out[b][0][i];
        std::printf("%18zu", differ[a][b]);
      }
      std::printf("\n");
    }
    const size_t naive = 0, ring = 1, hd = 2, tree = 3;  // algorithm_names() order
    if (ws == 2) {                                       // one addition, and float addition is commutative: all agree
      for (size_t a = 0; a < names.size(); ++a) {
        for (size_t b = 0; b < names.size(); ++b) EXPECT_EQ(differ[a][b], 0u);
      }
    } else {
      EXPECT_GT(differ[naive][ring], 0u) << "ring reassociates for ws >= 3";
    }
    if (ws == 3) {
      EXPECT_EQ(differ[naive][tree], 0u) << "(x0 + x1) + x2 is the rank-order sum";
      EXPECT_GT(differ[naive][hd], 0u) << "(x0 + x2) + x1 is not";
    }
  }
}

// --threads splits an all-reduce into spans of elements; every algorithm must give each element the same
// additions as the whole call. Spans cut across Gloo segments, ring chunks and NCCL chunks; the whole call
// is the reference, and a span-by-span run that got one boundary wrong would differ in those elements.
TEST(Allreduce, SpansGiveTheBitsOfTheWholeCall) {
  for (Algorithm a :
       {Algorithm::naive, Algorithm::ring, Algorithm::halving_doubling, Algorithm::tree, Algorithm::nccl_ring}) {
    for (size_t ws : {2, 3, 5, 8}) {
      for (size_t n : {1, 17, 1000, 300007}) {
        const Data whole = run(a, random_data(ws, n, 7 + n));
        for (size_t parts : {2, 3, 7}) {
          Data d = random_data(ws, n, 7 + n);
          for (size_t t = parts; t-- > 0;) {  // out of order, as threads may run them
            const size_t lo = n * t / parts, hi = n * (t + 1) / parts;
            std::vector<float*> at;  // each rank's element lo
            for (auto& v : d) at.push_back(v.data() + lo);
            if (lo < hi) allreduce_sum(a, at, n, Span{lo, hi});
          }
          size_t wrong = 0;
          for (size_t r = 0; r < ws; ++r) {
            wrong += static_cast<size_t>(std::memcmp(d[r].data(), whole[r].data(), n * sizeof(float)) != 0);
          }
          EXPECT_EQ(wrong, 0u) << algorithm_name(a) << " ws=" << ws << " n=" << n << " parts=" << parts;
        }
      }
    }
  }
}

// The same through a thread pool of 1, 2 and 3 threads (allreduce_sum's own split).
TEST(Allreduce, ThreadPoolsGiveTheBitsOfOneThread) {
  for (Algorithm a : {Algorithm::ring, Algorithm::halving_doubling, Algorithm::nccl_ring}) {
    const Data one = run(a, random_data(4, 1 << 20, 3));
    for (int threads : {2, 3}) {
      ThreadPool pool(threads);
      Data d = random_data(4, 1 << 20, 3);
      std::vector<float*> ptrs;
      for (auto& v : d) ptrs.push_back(v.data());
      allreduce_sum(a, ptrs, d[0].size(), &pool);
      EXPECT_EQ(d, one) << algorithm_name(a) << " threads=" << threads;
    }
  }
}

// --explain's symbols (src/collective/symbolic.h): each algorithm's own code run on them gives, per element,
// the grouping that, evaluated on floats, is bit for bit what the float code computes; and the groupings the
// algorithm files state.
TEST(Symbolic, TheGroupingIsTheAlgorithmsOwn) {
  for (size_t a = 0; a < algorithm_names().size(); ++a) {
    for (size_t ws : {1, 2, 3, 4, 5, 7}) {
      for (size_t n : {1, 5, 37, 1000}) {
        const Data d = random_data(ws, n, 100 * ws + n);
        const Data want = run(static_cast<Algorithm>(a), d);
        const auto bufs = allreduce_symbols(static_cast<Algorithm>(a), ws, n);
        size_t wrong = 0;
        for (size_t i = 0; i < n; ++i) {
          std::vector<float> x(ws);
          for (size_t r = 0; r < ws; ++r) x[r] = d[r][i];
          for (size_t r = 0; r < ws; ++r) {
            const float got = sym_eval(bufs[r][i], x.data());
            wrong += std::memcmp(&got, &want[r][i], sizeof(float)) != 0;
          }
        }
        EXPECT_EQ(wrong, 0u) << algorithm_names()[a] << " ws " << ws << " n " << n;
      }
    }
  }
  const auto text = [](Algorithm a, size_t ws, size_t n, size_t i) { return sym_text(allreduce_symbols(a, ws, n)[0][i]); };
  EXPECT_EQ(text(Algorithm::naive, 4, 8, 5), "((x0 + x1) + x2) + x3");
  EXPECT_EQ(text(Algorithm::tree, 4, 8, 5), "(x0 + (x1 + x3)) + x2");                // tree.cc's v_i
  EXPECT_EQ(text(Algorithm::nccl_ring, 3, 12, 0), "(x1 + x2) + x0");                 // chunk 0 starts at 1
  EXPECT_EQ(text(Algorithm::nccl_ring, 3, 12, 11), "(x0 + x1) + x2");                // chunk 2 starts at 0
  EXPECT_EQ(text(Algorithm::halving_doubling, 4, 8, 0), "(x0 + x2) + (x1 + x3)");    // distance 2, then 1
}

TEST(RingLayout, FollowsGlooSegmentation) {
  // 1000 floats on 4 ranks: 8 segments of 125 floats, two per rank.
  RingLayout L = gloo_ring_layout(1000, 4);
  EXPECT_EQ(L.num_segments, 8u);
  EXPECT_EQ(L.segment_elems, 125u);
  EXPECT_EQ(L.chunk_begin, (std::vector<size_t>{0, 250, 500, 750}));
  // 7 floats on 3 ranks: 6 segments of 2 floats (28 bytes / 6 rounded up to 8 bytes): chunks 4, 3, 0.
  L = gloo_ring_layout(7, 3);
  EXPECT_EQ(L.segment_elems, 2u);
  EXPECT_EQ(L.chunk_end, (std::vector<size_t>{4, 7, 7}));
}

// Runs Debian's Gloo ring all-reduce with one thread per rank over loopback TCP.
Data gloo_allreduce(Data d) {
  const int ws = static_cast<int>(d.size());
  gloo::rendezvous::HashStore store;
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  std::vector<std::thread> threads;
  for (int r = 0; r < ws; ++r) {
    threads.emplace_back([&, r] {
      auto ctx = std::make_shared<gloo::rendezvous::Context>(r, ws);
      ctx->setTimeout(std::chrono::seconds(30));
      ctx->connectFullMesh(store, device);
      gloo::AllreduceOptions opts(ctx);
      opts.setOutput(d[static_cast<size_t>(r)].data(), d[static_cast<size_t>(r)].size());
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setTimeout(std::chrono::seconds(30));
      gloo::allreduce(opts);
    });
  }
  for (auto& t : threads) t.join();
  return d;
}

TEST(Ring, BitwiseEqualToDebiansGloo) {
  // Sizes cover short and empty chunks, and buffers over 2 * ws MiB where Gloo uses more segments.
  for (size_t ws : {2, 3, 4}) {
    for (size_t n : {1, 7, 1000, 300001, 2500000}) {
      const Data d = random_data(ws, n, 77 + n);
      const Data real = gloo_allreduce(d);
      const Data sim = run(Algorithm::ring, d);
      const Data naive = run(Algorithm::naive, d);
      size_t wrong = 0, differs_from_naive = 0;
      for (size_t i = 0; i < n; ++i) {
        wrong += sim[0][i] != real[0][i];
        differs_from_naive += naive[0][i] != real[0][i];
      }
      std::printf("ws=%zu n=%-8zu ring vs gloo: %zu wrong | gloo vs rank-order sum: %zu elements differ\n", ws, n,
                  wrong, differs_from_naive);
      EXPECT_EQ(wrong, 0u) << "ws=" << ws << " n=" << n;
      for (size_t r = 1; r < ws; ++r) EXPECT_EQ(real[r], real[0]);
    }
  }
}

}  // namespace
}  // namespace ddplab::collective
