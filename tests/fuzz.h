// What the two fuzz suites share (fuzz_safetensors_test, fuzz_flags_test): seeded, deterministic
// randomness, and the largest single allocation through operator new (tests/fuzz.cc replaces it), to
// catch a size taken from the input. Each case must end in the project's error or success: any other
// exception, a crash (the sanitizer builds run these too) or an allocation over kMaxAlloc fails.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

// The largest single allocation so far (tests reset it to 0).
extern std::atomic<size_t> g_largest;

namespace ddplab::fuzz {

constexpr size_t kMaxAlloc = 16u << 20;  // the files are under 2 KB: nothing legitimate comes near this
constexpr uint64_t kSeed = 20240611;

using Rng = std::mt19937_64;

inline uint64_t pick(Rng& rng, uint64_t n) { return n ? rng() % n : 0; }  // [0, n)
template <class T>
const T& pick(Rng& rng, const std::vector<T>& v) {
  return v[pick(rng, v.size())];
}

}  // namespace ddplab::fuzz
