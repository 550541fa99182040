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
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "src/base/safetensors.h"
#include "tests/fuzz.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using namespace fuzz;

constexpr int kSafetensorsCases = 20000;

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
