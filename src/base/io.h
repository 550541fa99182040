// Writing output files so that a reader never sees half a file, and small JSON helpers for dumps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "src/tensor/tensor.h"

namespace ddplab {

// Writes `content` to `path` through a temporary file in the same directory, fsync, then rename, so a
// reader never sees half a file. A symbolic link is followed: its target gets the content, the link stays.
// A character device or FIFO (/dev/null, /dev/stdout) is written in place, never replaced by a file.
// Returns "" on success, else a one-line reason (the temporary file is removed).
std::string write_file_atomic(const std::string& path, const std::string& content);

// "" when write_file_atomic(path) can succeed: not a directory, not another special file, a name short
// enough for the temporary file beside it, an existing writable directory; else a one-line reason.
// Checked before any work starts, so a bad output path fails fast (exit 2), not after the run.
std::string check_writable(const std::string& path);

// A float32 with 9 significant digits (round-trips exactly), as JSON.
std::string json_float(float v);
// A JSON string literal: quotes, backslashes and control characters escaped.
std::string json_string(const std::string& s);
// A parameter as nested JSON lists: [[...], ...] for a weight [out][in], [...] for a bias.
std::string json_tensor(const Parameter& p);
// {"0.running_mean": [...], "0.num_batches_tracked": 3, ...}
std::string json_buffers(const std::vector<const Buffer*>& buffers);
// A state_dict as a JSON object, {"layers.0.weight": [[...]], ...}; `names` overrides the keys.
std::string json_params(const std::vector<const Parameter*>& params, const std::vector<std::string>& names = {});

// 64-bit FNV-1a over the floats' bytes (little-endian bit patterns): a short fingerprint of exact results,
// e.g. real NCCL's sums recorded on a GPU (tests/golden/nccl/) and recomputed without one.
uint64_t fnv1a_bits(const float* v, size_t n);

}  // namespace ddplab
