#include "src/data/text_data.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "src/base/errors.h"

namespace ddplab {

const char* const kTextDefaultPath = "/usr/share/common-licenses/GPL-3";

const char* split_name(Split s) { return s == Split::kTrain ? "train" : "val"; }

TextData TextData::load(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) throw UsageError(fmt::format("--data {}: cannot open: {}", path, std::strerror(errno)));
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const size_t got = std::fread(buf, 1, sizeof buf, f.get());
    bytes.append(buf, got);
    if (static_cast<int64_t>(bytes.size()) > kMaxTextBytes) {
      throw UsageError(fmt::format("--data {}: larger than the limit of {} bytes", path, kMaxTextBytes));
    }
    if (got < sizeof buf) break;
  }
  // A directory opens but does not read (EISDIR): say so rather than call it empty.
  if (std::ferror(f.get())) throw UsageError(fmt::format("--data {}: cannot read: {}", path, std::strerror(errno)));
  return from_bytes(bytes, path);
}

TextData TextData::from_bytes(std::string_view bytes, std::string name) {
  if (bytes.empty()) throw UsageError(fmt::format("--data {}: the file is empty", name));
  if (static_cast<int64_t>(bytes.size()) > kMaxTextBytes) {
    throw UsageError(fmt::format("--data {}: larger than the limit of {} bytes", name, kMaxTextBytes));
  }
  TextData d;
  d.name_ = std::move(name);
  bool seen[256] = {};
  for (const char c : bytes) seen[static_cast<unsigned char>(c)] = true;
  d.token_of_byte_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (!seen[b]) continue;
    d.token_of_byte_[b] = static_cast<int16_t>(d.vocab_.size());
    d.vocab_.push_back(static_cast<char>(b));
  }
  // Python's int(n * 0.9): the double product truncated (exact for any n this size).
  const auto n = static_cast<int64_t>(bytes.size());
  const auto n_train = static_cast<int64_t>(static_cast<double>(n) * 0.9);
  d.train_.reserve(static_cast<size_t>(n_train));
  d.val_.reserve(static_cast<size_t>(n - n_train));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = d.token_of_byte_[static_cast<unsigned char>(bytes[static_cast<size_t>(i)])];
    (i < n_train ? d.train_ : d.val_).push_back(t);
  }
  return d;
}

int64_t TextData::max_block_size() const { return static_cast<int64_t>(std::min(train_.size(), val_.size())) - 1; }

void TextData::check_batch_shape(int64_t batch_size, int64_t block_size) const {
  if (batch_size < 1) throw UsageError(fmt::format("--batch-size must be at least 1, got {}", batch_size));
  if (block_size < 1) throw UsageError(fmt::format("--block-size must be at least 1, got {}", block_size));
  if (block_size > max_block_size()) {
    throw UsageError(
        fmt::format("--block-size {} is too long for --data {}: its splits have {} (train) and {} (val) tokens, and "
                    "get_batch draws a start below len - block_size, so --block-size must be at most {}",
                    block_size, name_, train_.size(), val_.size(), std::max<int64_t>(max_block_size(), 0)));
  }
}

Batch TextData::get_batch(Split split, Generator& gen, int64_t batch_size, int64_t block_size) const {
  check_batch_shape(batch_size, block_size);
  const std::vector<int64_t>& data = tokens(split);
  const std::vector<int64_t> ix = gen.randint(static_cast<int64_t>(data.size()) - block_size, batch_size);
  Batch b;
  b.batch_size = batch_size;
  b.block_size = block_size;
  b.x.reserve(static_cast<size_t>(batch_size * block_size));
  b.y.reserve(static_cast<size_t>(batch_size * block_size));
  for (const int64_t i : ix) {
    b.x.insert(b.x.end(), data.begin() + i, data.begin() + i + block_size);
    b.y.insert(b.y.end(), data.begin() + i + 1, data.begin() + i + 1 + block_size);
  }
  return b;
}

std::string TextData::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (const int64_t t : tokens) {
    if (t < 0 || t >= vocab_size()) {
      throw UsageError(
          fmt::format("decode: token {} is outside the vocabulary of {} (0..{})", t, vocab_size(), vocab_size() - 1));
    }
    out.push_back(vocab_[static_cast<size_t>(t)]);
  }
  return out;
}

std::vector<int64_t> TextData::encode(std::string_view text) const {
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (const char c : text) {
    const int16_t t = token_of_byte_[static_cast<unsigned char>(c)];
    if (t < 0) {
      throw UsageError(fmt::format("encode: byte 0x{:02x} does not occur in --data {}, so it has no token",
                                   static_cast<unsigned char>(c), name_));
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace ddplab
