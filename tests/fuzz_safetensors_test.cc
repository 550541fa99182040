// A seeded mutation fuzzer, deterministic (same cases every run), for safetensors::load: valid files written
// by the project's writer and by hand, mutated (bit flips, bytes set, truncations, the header length
// rewritten, JSON numbers and strings replaced, insertions, deletions). Every case must end in FormatError
// or success: any other exception, a crash (the sanitizer builds run this too) or an allocation over
// kMaxAlloc fails. Prints one summary line, e.g.
//   fuzz safetensors: 20000 cases, 18000 refused cleanly, 2000 loaded, 0 crashes
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "src/safetensors.h"
#include "tests/fuzz.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using namespace fuzz;

constexpr int kSafetensorsCases = 20000;

std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

// A seed file split into header text and data, so that JSON-level mutations can keep the length field right.
struct Parts {
  std::string header, data;
  std::string bytes() const { return le64(header.size()) + header + data; }
};

Parts split(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return {bytes.substr(8, n), bytes.substr(8 + n)};
}

std::string f32(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<Parts> seeds(const std::string& dir) {
  std::vector<Parts> out;
  // 1. The 002 lab's checkpoint layout, by the project's writer (with its checksum).
  safetensors::TensorMap model;
  std::vector<float> w(100), b(10);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * static_cast<float>(i) - 0.3f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -0.5f + 0.1f * static_cast<float>(i);
  model["module.net.weight"] = {{10, 10}, w};
  model["module.net.bias"] = {{10}, b};
  // 2. Scalars, empty tensors, several ranks, by the project's writer.
  safetensors::TensorMap odd;
  odd["a"] = {{2, 3}, {1, 2, 3, 4, 5, 6}};
  odd["empty"] = {{0, 4}, {}};
  odd["s"] = {{}, {42.0f}};
  odd["z"] = {{1, 1, 1}, {-0.0f}};
  for (const auto& [name, m] : {std::pair{"model", model}, std::pair{"odd", odd}}) {
    const std::string path = dir + "/seed_" + name + ".safetensors";
    if (safetensors::save(path, m) != "") throw std::runtime_error("cannot write a seed");
    out.push_back(split(slurp(path)));
  }
  // 3. Standard files as other writers make them: no checksum, metadata or not, data not in name order.
  out.push_back(
      {R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}  )",
       f32({1, 2, 3, 4, 5, 6})});
  out.push_back(
      {R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
       R"("e":{"dtype":"F32","shape":[0],"data_offsets":[12,12]},"y":{"dtype":"F32","shape":[1,1],"data_offsets":[12,16]}})",
       f32({7, 8, 9, 10})});
  return out;
}

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

// The kind of a message, for the log's tally: numbers become #, quoted names "_", cut to 56 characters.
std::string kind(const std::string& msg, const std::string& path) {
  const std::string s = msg.substr(msg.rfind(path + ": ", 0) == 0 ? path.size() + 2 : 0);
  std::string out;
  bool quoted = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"' && (i == 0 || s[i - 1] != '\\')) {
      quoted = !quoted;
      if (quoted) out += "\"_\"";
    } else if (quoted) {
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      if (out.empty() || out.back() != '#') out += '#';
    } else {
      out += c;
    }
  }
  return out.substr(0, 56);
}

// The allocation check itself: a large allocation is seen (and not optimised away).
TEST(Fuzz, AllocationTrackerSeesLargeAllocations) {
  g_largest = 0;
  std::vector<char> big(kMaxAlloc + 1);
  volatile char* p = big.data();
  p[kMaxAlloc] = 1;
  EXPECT_EQ(p[kMaxAlloc], 1);
  EXPECT_GT(g_largest.load(), kMaxAlloc);
}

TEST(Fuzz, SafetensorsLoadRefusesCleanlyOrLoads) {
  const auto start = std::chrono::steady_clock::now();
  const std::string dir = testing::temp_dir();
  const std::vector<Parts> base = seeds(dir);
  const std::string path = dir + "/case.safetensors";
  Rng rng(kSeed);
  int refused = 0, loaded = 0, crashes = 0;
  std::map<std::string, int> kinds;
  for (int c = 0; c < kSafetensorsCases; ++c) {
    Parts p = base[pick(rng, base.size())];
    std::string how;
    // Half the cases change only JSON values (the length field kept right): they reach the field checks.
    const uint64_t mode = pick(rng, 10);
    const uint64_t header_mutations = mode < 5 ? 1 + pick(rng, 3) : mode < 7 ? 1 : pick(rng, 2);
    const uint64_t byte_mutations = mode < 7 ? 0 : 1 + pick(rng, 2);
    for (uint64_t i = 0; i < header_mutations; ++i) how += mutate_header(rng, p, mode < 5 || mode >= 7) + "; ";
    std::string bytes = p.bytes();
    for (uint64_t i = 0; i < byte_mutations; ++i) how += mutate_bytes(rng, bytes, 8 + p.header.size()) + "; ";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;

    std::string failure;
    bool was_loaded = false;
    g_largest = 0;
    try {
      const safetensors::TensorMap m = safetensors::load(path);
      was_loaded = true;
      uint64_t floats = 0;
      for (const auto& [name, t] : m) {
        uint64_t numel = 1;
        for (int64_t d : t.shape) {
          if (d < 0) failure = "tensor " + name + ": negative dimension";
          numel *= static_cast<uint64_t>(d);
        }
        if (numel != t.data.size()) failure = "tensor " + name + ": data size differs from its shape";
        floats += t.data.size();
      }
      if (floats * 4 > bytes.size()) failure = "more floats than the file holds";
    } catch (const safetensors::FormatError& e) {
      const std::string what = e.what();
      if (what.find('\n') != std::string::npos || what.rfind(path + ": ", 0) != 0)
        failure = "message not one line naming the file: " + what;
      ++kinds[kind(what, path)];
    } catch (const std::exception& e) {
      failure = std::string("another exception: ") + e.what();
    } catch (...) {
      failure = "a non-std exception";
    }
    if (g_largest > kMaxAlloc) failure += " allocation of " + std::to_string(g_largest.load()) + " bytes";
    if (failure.empty()) (was_loaded ? loaded : refused)++;
    if (!failure.empty()) {
      ++crashes;
      const char* out = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
      const std::string keep =
          std::string(out ? out : dir.c_str()) + "/fuzz_case_" + std::to_string(c) + ".safetensors";
      std::ofstream(keep, std::ios::binary) << bytes;
      ADD_FAILURE() << "case " << c << " (" << how << "): " << failure << " (bytes kept in " << keep << ")";
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("most frequent refusals:\n");
  std::vector<std::pair<int, std::string>> top;
  for (const auto& [k, n] : kinds) top.emplace_back(-n, k);
  std::sort(top.begin(), top.end());
  for (size_t i = 0; i < std::min<size_t>(top.size(), 12); ++i)
    std::printf("  %5d  %s\n", -top[i].first, top[i].second.c_str());
  std::printf(
      "fuzz safetensors: %d cases, %d refused cleanly, %d loaded, %d crashes (seed %llu, %zu kinds of refusal, %.1f "
      "s)\n",
      kSafetensorsCases, refused, loaded, crashes, static_cast<unsigned long long>(kSeed), kinds.size(), secs);
  EXPECT_EQ(crashes, 0);
  EXPECT_GT(loaded, 0) << "no mutation left a loadable file: the fuzzer explores nothing past the checks";
  EXPECT_GT(kinds.size(), 30u) << "the mutations reach too few of the checks";
}

}  // namespace
}  // namespace ddplab
