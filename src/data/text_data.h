// A byte-level text dataset as nanoGPT's character-level data and get_batch make it (the tiny GPT's data):
// vocabulary = the file's sorted distinct bytes, token = a byte's index in it, train = the first
// int(n * 0.9) tokens, val = the rest, batches drawn with torch.randint from a given generator.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/data/torch_rng.h"

namespace ddplab {

// Debian's GPL-3 text (35149 bytes), on every Debian machine.
extern const char* const kTextDefaultPath;

enum class Split { kTrain, kVal };
const char* split_name(Split s);  // "train", "val"

// x and y as [batch_size, block_size] int64 tensors, row-major: y is x shifted by one token.
struct Batch {
  int64_t batch_size = 0, block_size = 0;
  std::vector<int64_t> x, y;
};

class TextData {
 public:
  // Reads the file's bytes. Throws UsageError (one line naming the file) when it cannot be read, is empty,
  // or is larger than kMaxTextBytes.
  static TextData load(const std::string& path);
  // The same from bytes in memory; `name` is what errors call them.
  static TextData from_bytes(std::string_view bytes, std::string name);

  static constexpr int64_t kMaxTextBytes = int64_t{1} << 28;  // 256 MiB: 2 GiB of int64 tokens

  const std::string& name() const { return name_; }
  int64_t vocab_size() const { return static_cast<int64_t>(vocab_.size()); }
  const std::string& vocab() const { return vocab_; }  // the distinct bytes, sorted: token i is vocab()[i]
  const std::vector<int64_t>& tokens(Split s) const { return s == Split::kTrain ? train_ : val_; }

  // The largest block_size get_batch accepts on both splits: torch.randint(len(data) - block_size) needs
  // len(data) - block_size >= 1.
  int64_t max_block_size() const;
  // Throws UsageError unless 1 <= batch_size and 1 <= block_size <= max_block_size(); the flags it names are
  // --batch-size and --block-size. get_batch checks the same, a command can check before it builds a model.
  void check_batch_shape(int64_t batch_size, int64_t block_size) const;

  // nanoGPT's get_batch: ix = torch.randint(len(data) - block_size, (batch_size,), generator=gen);
  // x = stack(data[i:i+block_size]), y = stack(data[i+1:i+1+block_size]).
  Batch get_batch(Split split, Generator& gen, int64_t batch_size, int64_t block_size) const;

  // Tokens back to the bytes they stand for (sampled text). Throws UsageError on a token outside the vocabulary.
  std::string decode(const std::vector<int64_t>& tokens) const;
  // Bytes to tokens (a prompt). Throws UsageError on a byte the file does not contain.
  std::vector<int64_t> encode(std::string_view text) const;

 private:
  std::string name_;
  std::string vocab_;
  std::array<int16_t, 256> token_of_byte_{};  // -1: not in the vocabulary
  std::vector<int64_t> train_, val_;
};

}  // namespace ddplab
