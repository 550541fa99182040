// 16-bit values against torch 1.13 (tests/golden/half, make_half_goldens.py): half.h's conversions and
// division, the in-process ring on Half against real Gloo's float16 all-reduce, every algorithm on Half and
// BFloat16 (exact sums, spans), and LocalGroup's 16-bit all_reduce against the ring.
#include <cmath>
#include <thread>

#include <gtest/gtest.h>

#include "src/collective/allreduce.h"
#include "src/collective/ring.h"
#include "src/comm/local_group.h"
#include "tests/half_test.h"

namespace ddplab {
namespace {

using testing::bits_of;
using testing::json;
using testing::print_bits16;
using testing::u16;

const json& conversions() {
  static const json j = testing::load_json("tests/golden/half/conversions.json");
  return j;
}
const json& gloo_golden() {
  static const json j = testing::load_json("tests/golden/half/gloo_fp16.json");
  return j;
}

std::vector<float> floats_of_bits(const json& j) {
  std::vector<float> out;
  for (int64_t b : testing::ints(j)) out.push_back(bits_float(static_cast<uint32_t>(b)));
  return out;
}

TEST(HalfConversions, FloatToHalfEqualsTorch) {
  std::vector<uint16_t> got;
  for (float f : floats_of_bits(conversions()["float_bits"])) got.push_back(to_half(f).bits);
  EXPECT_TRUE(print_bits16("float32 -> float16 (.to(torch.float16))", got, u16(conversions()["to_half"])).exact());
}

// torch 1.13's AVX2 kernel (the pinned one) writes every bfloat16 NaN as 0xFFFF; c10::BFloat16 (a 0-dim
// tensor, or ATEN_CPU_CAPABILITY=default) writes 0x7FC0, as half.h does. Numbers: bitwise; NaNs: NaN.
TEST(HalfConversions, FloatToBFloat16EqualsTorchNaNPayloadsAside) {
  const std::vector<float> in = floats_of_bits(conversions()["float_bits"]);
  const std::vector<uint16_t> want = u16(conversions()["to_bfloat16"]);
  std::vector<uint16_t> got_num, want_num;
  size_t nans = 0, nan_both = 0, nan_ffff = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t g = to_bfloat16(in[i]).bits;
    if (std::isnan(in[i])) {
      ++nans;
      nan_both += std::isnan(to_float(BFloat16{g})) && std::isnan(to_float(BFloat16{want[i]}));
      nan_ffff += want[i] == 0xFFFF;
    } else {
      got_num.push_back(g), want_num.push_back(want[i]);
    }
  }
  EXPECT_TRUE(print_bits16("float32 -> bfloat16, numbers", got_num, want_num).exact());
  std::printf("float32 -> bfloat16, NaN inputs: %zu/%zu NaN in both (torch wrote 0xFFFF for %zu, half.h 0x7FC0)\n",
              nan_both, nans, nan_ffff);
  EXPECT_EQ(nan_both, nans);
  EXPECT_GT(nans, 5u);
}

TEST(HalfConversions, SixteenBitsToFloatEqualTorch) {
  const std::vector<uint16_t> in = u16(conversions()["bits16"]);
  const std::vector<int64_t> want_h = testing::ints(conversions()["half_to_float"]);
  const std::vector<int64_t> want_b = testing::ints(conversions()["bfloat16_to_float"]);
  size_t eq_h = 0, eq_b = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    eq_h += float_bits(to_float(Half{in[i]})) == static_cast<uint32_t>(want_h[i]);
    eq_b += float_bits(to_float(BFloat16{in[i]})) == static_cast<uint32_t>(want_b[i]);
  }
  std::printf("float16 -> float32: %zu/%zu bitwise; bfloat16 -> float32: %zu/%zu bitwise\n", eq_h, in.size(), eq_b,
              in.size());
  EXPECT_EQ(eq_h, in.size());
  EXPECT_EQ(eq_b, in.size());
}

// fp16_compress_hook's bucket.buffer().to(float16).div_(ws): one rounded division in the 16-bit type.
TEST(HalfConversions, DivisionByWorldSizeEqualsTorch) {
  const std::vector<uint16_t> h_in = u16(conversions()["div_half_in"]);
  const std::vector<uint16_t> b_in = u16(conversions()["div_bfloat16_in"]);
  for (const json& c : conversions()["div"]) {
    const int ws = c["ws"].get<int>();
    std::vector<uint16_t> h, b;
    for (uint16_t x : h_in) h.push_back((Half{x} / to_half(static_cast<float>(ws))).bits);
    for (uint16_t x : b_in) b.push_back((BFloat16{x} / to_bfloat16(static_cast<float>(ws))).bits);
    EXPECT_TRUE(print_bits16("float16 .div_(" + std::to_string(ws) + ")", h, u16(c["half_out"])).exact());
    EXPECT_TRUE(print_bits16("bfloat16 .div_(" + std::to_string(ws) + ")", b, u16(c["bfloat16_out"])).exact());
  }
}

// The in-process ring on halves equals real Gloo's dist.all_reduce of float16 tensors, ws 2-4, 1003 and
// 4,500,007 elements (segments cut for 2-byte elements). Rounding at every addition matters: a float32 sum
// rounded once differs from Gloo in some elements at ws >= 3 (printed).
TEST(HalfRing, EqualsRealGlooFloat16AllReduce) {
  const json& doc = gloo_golden();
  for (const json& c : doc["cases"]) {
    const size_t ws = c["ws"].get<size_t>(), n = c["n"].get<size_t>();
    std::vector<std::vector<Half>> d;
    for (size_t r = 0; r < ws; ++r) {
      d.push_back(testing::golden_input(doc, c, r));
      ASSERT_EQ(std::to_string(testing::fnv1a16(d[r])), c["input_fnv1a"][r].get<std::string>())
          << "ddplab's randn + to_half did not redraw rank " << r << "'s input";
    }
    std::vector<Half> once(n);  // float32 accumulation in rank order, rounded once
    for (size_t i = 0; i < n; ++i) {
      float s = to_float(d[0][i]);
      for (size_t r = 1; r < ws; ++r) s = s + to_float(d[r][i]);
      once[i] = to_half(s);
    }
    std::vector<Half*> ptrs;
    for (auto& v : d) ptrs.push_back(v.data());
    collective::allreduce_sum(collective::Algorithm::ring, ptrs, n);
    const std::string label = "ring<Half> ws " + std::to_string(ws) + " n " + std::to_string(n) + " vs gloo";
    EXPECT_TRUE(testing::matches_golden(label, d[0], c));
    for (size_t r = 1; r < ws; ++r) EXPECT_EQ(bits_of(d[r]), bits_of(d[0])) << "rank " << r;
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i) differ += once[i].bits != d[0][i].bits;
    std::printf("%-52s %zu of %zu differ from a float32 sum rounded once\n", "", differ, n);
    if (ws == 2) {
      EXPECT_EQ(differ, 0u) << "one addition: rounding once is rounding at every addition";
    }
  }
}

// Gloo rounds a segment's bytes up to the element size: for the golden's 4,500,007 halves at ws 3 that is
// 9 segments of 1,000,002 bytes = 500,001 halves; rounded to 4 bytes (floats) it would be 500,002.
TEST(HalfRing, SegmentsAreCutForTwoByteElements) {
  const collective::RingLayout h = collective::gloo_ring_layout(4500007, 3, sizeof(Half));
  EXPECT_EQ(h.num_segments, 9u);
  EXPECT_EQ(h.segment_elems, 500001u);
  EXPECT_EQ(collective::gloo_ring_layout(4500007, 3, 4).segment_elems * 2, 500002u);
  EXPECT_EQ(h.chunk_end, (std::vector<size_t>{1500003, 3000006, 4500007}));
}

// Every algorithm on 16-bit values: sums of small multiples of 1/4 are exact in float16 and bfloat16 in any
// order, so every rank must hold the exact sum; and spans give the bits of the whole call.
template <typename T>
void exact_sums_and_spans(T (*to16)(float), const char* type) {
  for (const std::string& name : collective::algorithm_names()) {
    const collective::Algorithm a = collective::parse_algorithm(name);
    for (size_t ws : {1, 2, 3, 4, 5, 8}) {
      for (size_t n : {1, 7, 1003, 70001}) {
        std::vector<std::vector<T>> d(ws, std::vector<T>(n));
        std::vector<float> want(n, 0.0f);
        for (size_t r = 0; r < ws; ++r) {
          for (size_t i = 0; i < n; ++i) {
            const float v = static_cast<float>(static_cast<int>((r * 7919 + i * 104729) % 17) - 8) * 0.25f;
            d[r][i] = to16(v), want[i] += v;
          }
        }
        std::vector<std::vector<T>> spans = d;
        std::vector<T*> ptrs;
        for (auto& v : d) ptrs.push_back(v.data());
        collective::allreduce_sum(a, ptrs, n);
        size_t wrong = 0;
        for (size_t r = 0; r < ws; ++r) {
          for (size_t i = 0; i < n; ++i) wrong += to_float(d[r][i]) != want[i];
        }
        EXPECT_EQ(wrong, 0u) << type << " " << name << " ws " << ws << " n " << n;
        for (size_t t = 3; t-- > 0;) {  // three spans, out of order
          const size_t lo = n * t / 3, hi = n * (t + 1) / 3;
          std::vector<T*> at;
          for (auto& v : spans) at.push_back(v.data() + lo);
          if (lo < hi) collective::allreduce_sum(a, at, n, collective::Span{lo, hi});
        }
        for (size_t r = 0; r < ws; ++r) EXPECT_EQ(bits_of(spans[r]), bits_of(d[r])) << type << " " << name;
      }
    }
  }
}

TEST(HalfAlgorithms, ExactSumsAndSpansOnHalfAndBFloat16) {
  exact_sums_and_spans<Half>(&to_half, "float16");
  exact_sums_and_spans<BFloat16>(&to_bfloat16, "bfloat16");
  std::printf("5 algorithms x ws {1,2,3,4,5,8} x n {1,7,1003,70001}: exact sums and span bits, float16 and bfloat16\n");
}

// LocalGroup's 16-bit all_reduce (threads, one per rank) equals the in-process ring; AVG is refused.
template <typename T>
void local_group_equals_ring(T (*to16)(float), const char* type) {
  for (int ws : {2, 3, 4}) {
    const size_t n = 300007;
    std::vector<std::vector<T>> d(static_cast<size_t>(ws));
    for (size_t r = 0; r < d.size(); ++r) {
      Generator g(100 + r);
      for (float x : g.randn(static_cast<int64_t>(n))) d[r].push_back(to16(x * static_cast<float>(1 << (2 * r))));
    }
    std::vector<std::vector<T>> ring = d;
    std::vector<T*> ptrs;
    for (auto& v : ring) ptrs.push_back(v.data());
    collective::allreduce_sum(collective::Algorithm::ring, ptrs, n);
    comm::LocalGroup g(ws, collective::Algorithm::ring);
    std::vector<std::thread> ts;
    for (int r = 0; r < ws; ++r) {
      ts.emplace_back(
          [&, r] { g.communicator(r)->all_reduce(d[static_cast<size_t>(r)].data(), n, comm::ReduceOp::sum); });
    }
    for (auto& t : ts) t.join();
    for (size_t r = 0; r < d.size(); ++r) {
      EXPECT_TRUE(print_bits16(std::string("LocalGroup ") + type + " ws " + std::to_string(ws) + " rank " +
                                   std::to_string(r) + " vs ring",
                               bits_of(d[r]), bits_of(ring[r]))
                      .exact());
    }
  }
  comm::LocalGroup g(1, collective::Algorithm::ring);
  T x = to16(1.0f);
  EXPECT_THROW(g.communicator(0)->all_reduce(&x, 1, comm::ReduceOp::avg), comm::CommError);
}

TEST(HalfLocalGroup, EqualsTheRing) {
  local_group_equals_ring<Half>(&to_half, "float16");
  local_group_equals_ring<BFloat16>(&to_bfloat16, "bfloat16");
}

}  // namespace
}  // namespace ddplab
