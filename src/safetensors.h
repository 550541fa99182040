// Checkpoints in the safetensors layout: 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range (plus "__metadata__" with a checksum of the data), then the raw
// little-endian float32 data. Written atomically (temporary file, fsync, rename); a corrupt or truncated
// file is refused with one line saying what is wrong.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddplab::safetensors {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
using TensorMap = std::map<std::string, Tensor>;  // sorted by name, like safetensors writes them

struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// FNV-1a 64 over the data bytes, as 16 hex digits.
std::string checksum(const std::string& bytes);

// Returns "" or the reason the file could not be written.
std::string save(const std::string& path, const TensorMap& tensors);
// Throws FormatError("<path>: <what is wrong>").
TensorMap load(const std::string& path);

}  // namespace ddplab::safetensors
