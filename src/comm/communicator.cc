#include "src/comm/communicator.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <fmt/format.h>

namespace ddplab::comm {
namespace {

// all_gather_strings: the longest string one rank may contribute, and the most all of them may take.
constexpr uint64_t kMaxGatheredString = uint64_t{1} << 30;  // 1 GiB
constexpr uint64_t kMaxGatheredTotal = uint64_t{4} << 30;   // 4 GiB

}  // namespace

void Communicator::all_reduce(Half*, size_t, ReduceOp) {
  throw CommError(backend() + " backend has no float16 all_reduce");
}
void Communicator::all_reduce(BFloat16*, size_t, ReduceOp) {
  throw CommError(backend() + " backend has no bfloat16 all_reduce");
}

void Communicator::all_reduce_device(float*, size_t, ReduceOp) {
  throw CommError(backend() + " backend has no device-resident all_reduce");
}
void Communicator::broadcast_device(float*, size_t, int) {
  throw CommError(backend() + " backend has no device-resident broadcast");
}

std::string collective_label(const std::string& name, uint64_t seq, const std::string& context) {
  if (context.empty()) return name + " #" + std::to_string(seq);
  return context + " (" + name + " #" + std::to_string(seq) + " on this rank)";
}

std::vector<std::string> all_gather_strings(Communicator& c, const std::string& mine) {
  const auto n = static_cast<size_t>(c.world_size());
  const uint64_t len = mine.size();
  std::vector<uint64_t> lens(n);
  c.all_gather(&len, sizeof len, lens.data());
  // Lengths come from the peers: check them before they size an allocation. Every rank sees the same
  // lengths, so every rank refuses alike (none is left waiting in the second all_gather).
  for (size_t r = 0; r < n; ++r) {
    if (lens[r] > kMaxGatheredString) {
      throw CommError(
          fmt::format("rank {}: all_gather_strings: rank {} reported a string of {} bytes; the limit is {} "
                      "bytes",
                      c.rank(), r, lens[r], kMaxGatheredString));
    }
  }
  if (lens[static_cast<size_t>(c.rank())] != len) {
    throw CommError(fmt::format("rank {}: all_gather_strings: this rank's length came back as {}, not {}", c.rank(),
                                lens[static_cast<size_t>(c.rank())], len));
  }
  const size_t width = *std::max_element(lens.begin(), lens.end());
  if (width * n > kMaxGatheredTotal) {
    throw CommError(fmt::format("rank {}: all_gather_strings: {} ranks x {} bytes exceed the limit of {} bytes",
                                c.rank(), n, width, kMaxGatheredTotal));
  }
  std::vector<char> padded(width, '\0'), all(width * n);
  std::memcpy(padded.data(), mine.data(), mine.size());
  if (width > 0) c.all_gather(padded.data(), width, all.data());
  std::vector<std::string> out;
  for (size_t r = 0; r < n; ++r) out.emplace_back(all.data() + r * width, lens[r]);
  return out;
}

std::vector<std::vector<float>> all_gather_floats(Communicator& c, const std::vector<float>& mine) {
  const auto got =
      all_gather_strings(c, std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(float)));
  std::vector<std::vector<float>> out;
  for (const std::string& g : got) {
    std::vector<float> v(g.size() / sizeof(float));
    std::memcpy(v.data(), g.data(), v.size() * sizeof(float));
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace ddplab::comm
