// What the safetensors suites share (safetensors_header_test, safetensors_read_test): files written by
// hand in the format's layout, and the one-line refusal a load gives.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "src/base/safetensors.h"
#include "tests/testing.h"

namespace ddplab::safetensors_testing {

using safetensors::FormatError;
using safetensors::LoadInfo;
using safetensors::TensorMap;
using testing::CommandResult;
using testing::json;

// A safetensors file by hand: 8-byte little-endian header length, the header as given, the data.
inline std::string st_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

inline std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));  // x86-64: LE
}

inline std::string write_file(const std::string& name, const std::string& bytes) {
  static const std::string dir = testing::temp_dir();
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

// The one-line refusal of `path`, or "(loaded)".
inline std::string refusal(const std::string& path) {
  try {
    safetensors::load(path);
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
    EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << "does not name the file: " << what;
    std::printf("refused: %s\n", what.c_str());
    return what;
  }
  return "(loaded)";
}

// The header with ddplab's checksum of `data` added to it, so that a crafted file passes the checksum and
// reaches the checks under test (the loader before these fixes read no file without it).
inline std::string with_sum(const std::string& header, const std::string& data) {
  if (header.size() < 2 || header[0] != '{') return header;
  const std::string meta = R"("__metadata__":{"checksum_fnv1a64":")" + safetensors::checksum(data) + "\"}";
  return "{" + meta + (header[1] == '}' ? "" : ",") + header.substr(1);
}

inline std::string refusal_of(const std::string& name, const std::string& header, const std::string& data) {
  return refusal(write_file(name, st_bytes(with_sum(header, data), data)));
}

// The file made of `header` and `data` is refused, and the reason contains `want`.
inline void expect_refused(const std::string& name, const std::string& header, const std::string& data,
                           const std::string& want) {
  const std::string why = refusal_of(name, header, data);
  EXPECT_NE(why.find(want), std::string::npos) << name << ": " << why;
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline CommandResult lab_load(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "20", "notebooks_ported/002_checkpoint/002_checkpoint",
                                   "--load"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::run_command(argv);
}

}  // namespace ddplab::safetensors_testing
