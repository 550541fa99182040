// What the two fuzz suites share (safetensors_fuzz_test, flags_fuzz_test): seeded, deterministic
// randomness, and the largest single allocation through operator new (tests/fuzz.cc replaces it), to
// catch a size taken from the input. Each case must end in the project's error or success: any other
// exception, a crash (the sanitizer builds run these too) or an allocation over kMaxAlloc fails.
// Then the mutations of safetensors files that safetensors_fuzz_test applies (in tests/fuzz.cc too).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
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

// ---- safetensors files (safetensors_fuzz_test): 8-byte little-endian header length, header, data. ----
std::string le64(uint64_t n);

// A seed file split into header text and data, so that JSON-level mutations can keep the length field right.
struct Parts {
  std::string header, data;
  std::string bytes() const { return le64(header.size()) + header + data; }
};

Parts split(const std::string& bytes);

// One JSON-level mutation of the header text (the length field is rewritten to match by Parts::bytes), and
// what it did. well_formed: only mutations that keep the JSON well-formed (a value replaced by another).
std::string mutate_header(Rng& rng, Parts& p, bool well_formed);

// One byte-level mutation of the whole file `f` (its header ends at header_end), and what it did.
std::string mutate_bytes(Rng& rng, std::string& f, size_t header_end);

}  // namespace ddplab::fuzz
