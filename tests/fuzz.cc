// The largest single allocation through operator new (see tests/fuzz.h). Linked whole into each fuzz test
// (alwayslink), so that these replacements are the program's. Then the mutations of safetensors files.
#include "tests/fuzz.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

// ---- The largest single allocation through operator new, to catch a size taken from the input. ----
// The replacements below pair malloc with free; GCC, seeing operator new's result reach free() after
// inlining, would warn about a mismatch that is none.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
std::atomic<size_t> g_largest{0};

namespace {
void* tracked_alloc(size_t n) noexcept {
  size_t prev = g_largest.load(std::memory_order_relaxed);
  while (n > prev && !g_largest.compare_exchange_weak(prev, n, std::memory_order_relaxed)) {
  }
  return std::malloc(n ? n : 1);
}
}  // namespace

void* operator new(size_t n) {
  if (void* p = tracked_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  if (void* p = tracked_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept { return tracked_alloc(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return tracked_alloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

// ---- The mutations of safetensors files (safetensors_fuzz_test). ----
namespace ddplab::fuzz {

std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

Parts split(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return {bytes.substr(8, n), bytes.substr(8 + n)};
}

namespace {

// Positions of JSON numbers (with a leading '-') and of JSON strings (the quotes included) in a header.
std::vector<std::pair<size_t, size_t>> numbers(const std::string& h) {
  std::vector<std::pair<size_t, size_t>> out;
  bool in_string = false;
  for (size_t i = 0; i < h.size(); ++i) {
    if (h[i] == '"' && (i == 0 || h[i - 1] != '\\')) in_string = !in_string;
    if (in_string || !(std::isdigit(static_cast<unsigned char>(h[i])) || h[i] == '-')) continue;
    size_t j = i;
    while (j < h.size() && (std::isdigit(static_cast<unsigned char>(h[j])) || std::strchr("-+.eE", h[j]))) ++j;
    out.emplace_back(i, j - i);
    i = j;
  }
  return out;
}

std::vector<std::pair<size_t, size_t>> strings(const std::string& h) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < h.size(); ++i) {
    if (h[i] != '"') continue;
    size_t j = i + 1;
    while (j < h.size() && h[j] != '"') j += h[j] == '\\' ? 2 : 1;
    if (j >= h.size()) break;
    out.emplace_back(i, j + 1 - i);
    i = j;
  }
  return out;
}

const std::vector<std::string> kNumbers = {"0",
                                           "1",
                                           "-1",
                                           "-0",
                                           "3",
                                           "4",
                                           "8",
                                           "12",
                                           "16",
                                           "2.5",
                                           "1e3",
                                           "1.0",
                                           "-4",
                                           "255",
                                           "4294967295",
                                           "4294967296",
                                           "2147483648",
                                           "9223372036854775807",
                                           "9223372036854775808",
                                           "-9223372036854775808",
                                           "-9223372036854775809",
                                           "18446744073709551615",
                                           "18446744073709551616",
                                           "99999999999999999999",
                                           "4611686018427387904",
                                           "4611686018427387905",
                                           "2305843009213693952",
                                           "1e308",
                                           "1e309",
                                           "-1e308",
                                           "100000000",
                                           "100000001",
                                           "00",
                                           "1.",
                                           "01"};
const std::vector<std::string> kStrings = {"\"\"",
                                           "\"F32\"",
                                           "\"F16\"",
                                           "\"BF16\"",
                                           "\"F64\"",
                                           "\"F4\"",
                                           "\"F6_E2M3\"",
                                           "\"BOOL\"",
                                           "\"Q8\"",
                                           "\"f32\"",
                                           "\"__metadata__\"",
                                           "\"dtype\"",
                                           "\"shape\"",
                                           "\"data_offsets\"",
                                           "\"checksum_fnv1a64\"",
                                           "\"0000000000000000\"",
                                           "\"a\\nb\"",
                                           "\"\\u0000\"",
                                           "\"\\ud800\"",
                                           "\"\xff\"",
                                           "5",
                                           "null",
                                           "[]",
                                           "{}",
                                           "[1,2]",
                                           "true"};
const std::vector<std::string> kValues = {  // whole JSON values, for a shape, data_offsets or metadata
    "[]",
    "[0]",
    "[-1]",
    "[1,-1]",
    "[0,0]",
    "[4611686018427387905]",
    "[4294967296,4294967296]",
    "[[1]]",
    "[1.5]",
    "null",
    "\"x\"",
    "{}",
    "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30]",
    "[18446744073709551615,18446744073709551615]",
    "[0,18446744073709551615]",
    "[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]",
    "{\"a\":\"b\"}",
    "{\"checksum_fnv1a64\":1}"};

}  // namespace

// One JSON-level mutation of the header text; the length field is rewritten to match afterwards.
// kinds 0-2 keep the JSON well-formed (a value replaced by another), 3-4 need not.
std::string mutate_header(Rng& rng, Parts& p, bool well_formed) {
  std::string& h = p.header;
  switch (pick(rng, well_formed ? 3 : 5)) {
    case 0: {
      const auto pos = numbers(h);
      if (pos.empty()) return "no number";
      const auto [at, len] = pick(rng, pos);
      const std::string v = pick(rng, kNumbers);
      h.replace(at, len, v);
      return "number -> " + v;
    }
    case 1: {
      const auto pos = strings(h);
      if (pos.empty()) return "no string";
      const auto [at, len] = pick(rng, pos);
      const std::string v = pick(rng, kStrings);
      h.replace(at, len, v);
      return "string -> " + v;
    }
    case 2: {  // a list or object value replaced whole
      std::vector<size_t> starts;
      for (size_t i = 1; i < h.size(); ++i) {
        if ((h[i] == '[' || h[i] == '{') && h[i - 1] == ':') starts.push_back(i);
      }
      if (starts.empty()) return "no value";
      const size_t at = pick(rng, starts);
      const char open = h[at], close = open == '[' ? ']' : '}';
      size_t end = at, depth = 0;
      for (; end < h.size(); ++end) {
        if (h[end] == open) ++depth;
        if (h[end] == close && --depth == 0) break;
      }
      const std::string v = pick(rng, kValues);
      h.replace(at, std::min(end, h.size() - 1) + 1 - at, v);
      return "value -> " + v;
    }
    case 3: {  // a structural character swapped
      static const std::string kStructural = "{}[],:\" ";
      const size_t at = pick(rng, h.size());
      h[at] = kStructural[pick(rng, kStructural.size())];
      return "structural at " + std::to_string(at);
    }
    default: {  // a range of the header deleted or duplicated
      const size_t at = pick(rng, h.size()), len = 1 + pick(rng, 24);
      if (rng() & 1) {
        h.erase(at, len);
        return "header erase";
      }
      h.insert(at, h.substr(at, len));
      return "header duplicate";
    }
  }
}

// One byte-level mutation of the whole file.
std::string mutate_bytes(Rng& rng, std::string& f, size_t header_end) {
  const auto at = [&](bool header_bias) {
    if (f.empty()) return size_t{0};
    if (header_bias && header_end > 0 && pick(rng, 4) != 0)
      return static_cast<size_t>(pick(rng, std::min(header_end, f.size())));
    return static_cast<size_t>(pick(rng, f.size()));
  };
  switch (pick(rng, 9)) {
    case 0: {
      if (f.empty()) return "empty";
      const size_t i = at(true);
      f[i] = static_cast<char>(f[i] ^ (1 << pick(rng, 8)));
      return "bit flip at " + std::to_string(i);
    }
    case 1:
    case 2:
    case 3: {
      if (f.empty()) return "empty";
      const size_t i = at(true);
      const int kind = static_cast<int>(pick(rng, 3));
      f[i] = static_cast<char>(kind == 0 ? 0 : kind == 1 ? 0xff : static_cast<int>(pick(rng, 256)));
      return "byte set at " + std::to_string(i);
    }
    case 4: {
      const size_t n = pick(rng, f.size());
      f.resize(n);
      return "truncated to " + std::to_string(n);
    }
    case 5: {  // the header length field rewritten
      const uint64_t n = header_end - 8, size = f.size();
      const std::vector<uint64_t> choices = {0,          1,         2,         7,          8,     n - 1,
                                             n + 1,      n + 8,     size - 8,  size - 7,   size,  1ull << 31,
                                             1ull << 32, 100000000, 100000001, 1ull << 63, ~0ull, rng()};
      const uint64_t v = pick(rng, choices);
      if (f.size() < 8) f.resize(8);
      f.replace(0, 8, le64(v));
      return "length field -> " + std::to_string(v);
    }
    case 6: {
      std::string ins(1 + pick(rng, 16), '\0');
      for (char& c : ins) c = static_cast<char>(pick(rng, 256));
      const size_t i = f.empty() ? 0 : at(true);
      f.insert(i, ins);
      return "insert at " + std::to_string(i);
    }
    case 7: {
      const size_t i = at(true);
      f.erase(i, 1 + pick(rng, 16));
      return "erase at " + std::to_string(i);
    }
    default: {
      const size_t n = 1 + pick(rng, 64);
      f.append(n, pick(rng, 2) ? '\0' : static_cast<char>(pick(rng, 256)));
      return "append " + std::to_string(n);
    }
  }
}

}  // namespace ddplab::fuzz
