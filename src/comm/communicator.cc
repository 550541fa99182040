#include "src/comm/communicator.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace ddplab::comm {

void Communicator::all_reduce_device(float*, size_t, ReduceOp) {
  throw CommError(backend() + " backend has no device-resident all_reduce");
}
void Communicator::broadcast_device(float*, size_t, int) {
  throw CommError(backend() + " backend has no device-resident broadcast");
}

std::vector<std::string> all_gather_strings(Communicator& c, const std::string& mine) {
  const auto n = static_cast<size_t>(c.world_size());
  const uint64_t len = mine.size();
  std::vector<uint64_t> lens(n);
  c.all_gather(&len, sizeof len, lens.data());
  const size_t width = *std::max_element(lens.begin(), lens.end());
  std::vector<char> padded(width, '\0'), all(width * n);
  std::memcpy(padded.data(), mine.data(), mine.size());
  if (width > 0) c.all_gather(padded.data(), width, all.data());
  std::vector<std::string> out;
  for (size_t r = 0; r < n; ++r) out.emplace_back(all.data() + r * width, lens[r]);
  return out;
}

}  // namespace ddplab::comm
