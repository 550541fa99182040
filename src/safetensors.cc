#include "src/safetensors.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "src/io.h"

namespace ddplab::safetensors {

std::string checksum(const std::string& bytes) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return fmt::format("{:016x}", h);
}

std::string save(const std::string& path, const TensorMap& tensors) {
  static_assert(sizeof(float) == 4, "float32");
  std::string data;
  nlohmann::ordered_json header;
  for (const auto& [name, t] : tensors) {
    const size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));  // x86-64: LE
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  nlohmann::ordered_json full;
  full["__metadata__"] = {{"format", "pt"}, {"checksum_fnv1a64", checksum(data)}};
  for (auto& [k, v] : header.items()) full[k] = v;
  std::string text = full.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // safetensors pads the header to 8 bytes
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += text;
  out += data;
  return write_file_atomic(path, out);
}

TensorMap load(const std::string& path) {
  const auto fail = [&](const std::string& what) { return FormatError(fmt::format("{}: {}", path, what)); };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw fail("cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string file = ss.str();
  if (file.size() < 8) throw fail(fmt::format("truncated: {} bytes, less than the 8-byte header length", file.size()));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[static_cast<size_t>(i)]);
  if (n > file.size() - 8) throw fail(fmt::format("truncated: header says {} bytes, the file has {} after it", n, file.size() - 8));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file.substr(8, n));
  } catch (const std::exception& e) {
    throw fail(std::string("corrupt header: ") + e.what());
  }
  const std::string data = file.substr(8 + n);
  if (!header.contains("__metadata__") || !header["__metadata__"].contains("checksum_fnv1a64")) {
    throw fail("no __metadata__ checksum");
  }
  TensorMap out;
  try {
    for (const auto& [name, t] : header.items()) {
      if (name == "__metadata__") continue;
      if (t.at("dtype") != "F32") throw fail(fmt::format("tensor '{}' has dtype {}, only F32 is read", name, t.at("dtype").dump()));
      Tensor tensor;
      tensor.shape = t.at("shape").get<std::vector<int64_t>>();
      const auto off = t.at("data_offsets").get<std::vector<uint64_t>>();
      int64_t numel = 1;
      for (int64_t d : tensor.shape) numel *= d;
      if (off.size() != 2 || off[1] < off[0] || off[1] > data.size() ||
          off[1] - off[0] != static_cast<uint64_t>(numel) * sizeof(float)) {
        throw fail(fmt::format("tensor '{}': data_offsets {} do not fit its shape or the {} data bytes", name,
                               t.at("data_offsets").dump(), data.size()));
      }
      tensor.data.resize(static_cast<size_t>(numel));
      std::memcpy(tensor.data.data(), data.data() + off[0], off[1] - off[0]);
      out[name] = std::move(tensor);
    }
  } catch (const nlohmann::json::exception& e) {
    throw fail(std::string("corrupt header: ") + e.what());
  }
  if (checksum(data) != header["__metadata__"]["checksum_fnv1a64"]) {
    throw fail("checksum mismatch: the data was changed or cut after it was written");
  }
  return out;
}

}  // namespace ddplab::safetensors
