// Checkpoints in the safetensors layout: 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and byte range (plus "__metadata__", where ddplab writes a checksum of the data),
// then the raw little-endian data. Written atomically (temporary file, fsync, rename).
//
// load() reads any standard safetensors file whose tensors are F32, whoever wrote it (ddplab, the
// safetensors library, a hand-written one): the checksum is verified where "__metadata__" has one, and a
// file without it is read unverified. Everything the header says is checked against the format's rules
// and the file's real size before anything is allocated or read: header length at most kMaxHeaderBytes
// and within the file, dtype known, shape entries non-negative integers whose element and byte counts
// do not overflow, data_offsets [begin, end] matching shape x dtype and tiling the data exactly (no
// overlap, no gap, no trailing bytes). Directories, devices, fifos and sockets are refused. Every
// refusal is a FormatError of one line, "<path>: <what is wrong and the limit>".
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

// The safetensors library's limit on the JSON header (its MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// FNV-1a 64 over the data bytes, as 16 hex digits.
std::string checksum(const std::string& bytes);

// Returns "" or the reason the file could not be written.
std::string save(const std::string& path, const TensorMap& tensors);

// What load() found besides the tensors.
struct Tensor64 {
  std::vector<int64_t> shape;
  std::vector<double> data;
};
struct LoadInfo {
  bool checksum_verified = false;               // "__metadata__" had checksum_fnv1a64, and it matched
  std::map<std::string, std::string> metadata;  // "__metadata__" as written (empty when absent)
  std::map<std::string, Tensor64> f64;          // the F64 tensors load() was asked for (f64_prefix)
};
// Throws FormatError("<path>: <what is wrong>"). Tensors are F32; F64 ones are read, into info->f64, only where
// their name begins with a non-empty f64_prefix (a trace's weighted sums, "wsum/"), and info is given.
// The bytes of one safetensors file inside a larger one (a record of a trace's steps.log): `length` bytes from
// `offset`; the default is the whole file.
struct Range {
  uint64_t offset = 0;
  uint64_t length = UINT64_MAX;
};
TensorMap load(const std::string& path, LoadInfo* info = nullptr, const std::string& f64_prefix = "", Range range = {});

}  // namespace ddplab::safetensors
