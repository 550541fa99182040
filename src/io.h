// Writing output files so that a reader never sees half a file, and small JSON helpers for dumps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/tensor.h"

namespace ddplab {

// Writes `content` to `path` through a temporary file in the same directory, fsync, then rename.
// Returns "" on success, else a one-line reason (the temporary file is removed).
std::string write_file_atomic(const std::string& path, const std::string& content);

// True when `path` could be created: its directory exists and is writable. Checked before any work
// starts, so a bad --dump-params path fails fast.
std::string check_writable(const std::string& path);

// A float32 with 9 significant digits (round-trips exactly), as JSON.
std::string json_float(float v);
// A parameter as nested JSON lists: [[...], ...] for a weight [out][in], [...] for a bias.
std::string json_tensor(const Parameter& p);
// A state_dict as a JSON object, {"layers.0.weight": [[...]], ...}; `names` overrides the keys.
std::string json_params(const std::vector<const Parameter*>& params, const std::vector<std::string>& names = {});

// 64-bit FNV-1a over the floats' bytes (little-endian bit patterns): a short fingerprint of exact results,
// e.g. real NCCL's sums recorded on a GPU (tests/golden/nccl/) and recomputed without one.
uint64_t fnv1a_bits(const float* v, size_t n);

}  // namespace ddplab
