// Shared by half_collective_test and half_gloo_test: the 16-bit goldens of tests/golden/half (torch 1.13), the
// inputs their Gloo all-reduces used, redrawn with ddplab's generator, and bit-for-bit counts on 16-bit values.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "src/collective/half.h"
#include "src/data/torch_rng.h"
#include "tests/testing.h"

namespace ddplab::testing {

// 64-bit FNV-1a over the values' little-endian bytes (make_half_goldens.py's fnv1a).
template <typename T>
uint64_t fnv1a16(const std::vector<T>& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const T& x : v) {
    for (int k = 0; k < 2; ++k) h = (h ^ ((x.bits >> (8 * k)) & 0xFFu)) * 0x100000001b3ull;
  }
  return h;
}

// Distance in units in the last place between two 16-bit patterns (sign-magnitude ordered as integers).
inline int64_t ulps16(uint16_t a, uint16_t b) {
  const auto ord = [](uint16_t u) -> int64_t { return (u & 0x8000u) ? -static_cast<int64_t>(u & 0x7FFFu) : u; };
  const int64_t d = ord(a) - ord(b);
  return d < 0 ? -d : d;
}

// How many of got equal want bit for bit, and the largest distance among the others; printed as one line.
struct Bits16 {
  int64_t equal = 0, total = 0, worst = 0;
  bool exact() const { return equal == total; }
};
inline Bits16 print_bits16(const std::string& label, const std::vector<uint16_t>& got,
                           const std::vector<uint16_t>& want) {
  Bits16 b;
  b.total = static_cast<int64_t>(want.size());
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (got[i] == want[i]) {
      ++b.equal;
    } else {
      b.worst = std::max(b.worst, ulps16(got[i], want[i]));
    }
  }
  if (got.size() != want.size()) b.equal = -1;
  std::printf("%-52s %lld/%lld bitwise, max ulps %lld\n", label.c_str(), static_cast<long long>(b.equal),
              static_cast<long long>(b.total), static_cast<long long>(b.worst));
  return b;
}

template <typename T>
std::vector<uint16_t> bits_of(const std::vector<T>& v) {
  std::vector<uint16_t> out;
  for (const T& x : v) out.push_back(x.bits);
  return out;
}

inline std::vector<uint16_t> u16(const json& j) {
  std::vector<uint16_t> out;
  for (int64_t v : ints(j)) out.push_back(static_cast<uint16_t>(v));
  return out;
}

// Rank r's input of a gloo_fp16.json case: (torch.randn(n, generator=manual_seed(seed)) * scale).half().
inline std::vector<Half> golden_input(const json& doc, const json& c, size_t r) {
  Generator g(c["seeds"][r].get<uint64_t>());
  const float scale = doc["scales"][r].get<float>();
  std::vector<Half> out;
  for (float x : g.randn(c["n"].get<int64_t>())) out.push_back(to_half(x * scale));
  return out;
}

// Compares an all-reduced output with a case: every element (n 1003) or the digest and the samples (big n).
// Returns true when bitwise equal.
inline bool matches_golden(const std::string& label, const std::vector<Half>& got, const json& c) {
  const bool digest = std::to_string(fnv1a16(got)) == c["output_fnv1a"].get<std::string>();
  if (c.contains("output")) {
    const bool all = print_bits16(label, bits_of(got), u16(c["output"])).exact();
    return all && digest;
  }
  std::vector<uint16_t> sampled;
  for (int64_t i : ints(c["sample_index"])) sampled.push_back(got[static_cast<size_t>(i)].bits);
  const bool samples = print_bits16(label + " (sampled)", sampled, u16(c["sample_output"])).exact();
  std::printf("%-52s digest of all %zu elements %s\n", label.c_str(), got.size(), digest ? "equal" : "DIFFERS");
  return samples && digest;
}

}  // namespace ddplab::testing
