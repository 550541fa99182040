// The digests the recorder writes for tensors it does not keep: fold64 (the default) and crc32 (older traces).
// docs/trace_format.md defines both.
#include <algorithm>
#include <cstring>
#include <vector>

#include <zlib.h>

#include "src/check/trace/trace.h"

namespace ddplab::check {

bool StepRecord::digest(const std::string& kind, const std::string& name, uint32_t* out) const {
  if (const safetensors::Tensor* t = find(kind, name)) {
    *out = digest_of(t->data);
    return true;
  }
  auto it = crc32.find(kind + "/" + name);
  if (it == crc32.end()) return false;
  *out = it->second;
  return true;
}

uint32_t crc32_of(const float* values, size_t n) {
  static_assert(sizeof(float) == 4, "float32");
  // zlib's crc32 takes a uInt length: feed it in pieces below 4 GiB.
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const auto* bytes = reinterpret_cast<const Bytef*>(values);
  size_t left = n * sizeof(float);
  while (left > 0) {
    const auto piece = static_cast<uInt>(std::min<size_t>(left, size_t{1} << 30));
    crc = ::crc32(crc, bytes, piece);
    bytes += piece;
    left -= piece;
  }
  return static_cast<uint32_t>(crc);
}

uint32_t crc32_of(const std::vector<float>& values) { return crc32_of(values.data(), values.size()); }

uint32_t fold64_of(const float* values, size_t n) {
  constexpr size_t kColumns = 1021;  // a prime: the rows of a weight matrix do not line up with the columns
  std::vector<uint64_t> sums(kColumns, 0);
  const size_t words = n / 2;
  size_t j = 0;
  for (; j + kColumns <= words; j += kColumns) {
    for (size_t c = 0; c < kColumns; ++c) {
      uint64_t w;
      std::memcpy(&w, values + 2 * (j + c), sizeof w);
      sums[c] += w;
    }
  }
  for (size_t c = 0; j + c < words; ++c) {
    uint64_t w;
    std::memcpy(&w, values + 2 * (j + c), sizeof w);
    sums[c] += w;
  }
  if (n % 2) {
    uint32_t last;
    std::memcpy(&last, values + n - 1, sizeof last);
    sums[words % kColumns] += last;
  }
  return static_cast<uint32_t>(::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(sums.data()),
                                       static_cast<uInt>(sums.size() * sizeof(uint64_t))));
}

uint32_t StepRecord::digest_of(const float* values, size_t n) const {
  return fold64 ? fold64_of(values, n) : crc32_of(values, n);
}

}  // namespace ddplab::check
