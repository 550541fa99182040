// Text from a trained Gpt, as nanoGPT's GPT.generate draws it under torch 1.13 on CPU: crop the context to
// block_size, logits[:, -1, :] / temperature, optional top-k, F.softmax, torch.multinomial(probs, 1).
// Every draw comes from the caller's generator, so a rank that samples with its own generator gets its own
// text from the same weights (tests/gpt_sample_test checks the tokens against torch).
#pragma once

#include <cstdint>
#include <vector>

#include "src/gpt/model.h"
#include "src/data/torch_rng.h"

namespace ddplab::gpt {

// torch.multinomial(probs, num_samples=1) for float32 probs [rows, cols] on CPU. torch 1.13 takes its fast path
// for one sample (Distributions.cpp): q = empty_like(probs).exponential_(1), one double uniform per ELEMENT
// (rows * cols draws, memory order), q = float(-log1p(-u)); then argmax(probs / q) along each row (the first
// maximum). Not the cumulative-distribution kernel, which torch runs only for several samples with
// replacement. Throws std::invalid_argument on torch's checks (inf, nan or negative entries; a zero row).
void multinomial_one(const float* probs, int64_t rows, int64_t cols, Generator& gen, int64_t* out);

struct SampleOptions {
  int64_t max_new_tokens = 32;
  double temperature = 1.0;  // logits / temperature: a float32 division by float(temperature), as torch's div
  int64_t top_k = 0;         // 0: no top-k
};

// model.generate(idx, max_new_tokens, temperature, top_k) with idx [B, T0] row-major: returns [B, T0 + new].
// Runs the model in eval mode (sample.py's model.eval(): no dropout, no draws) and restores its mode.
std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& idx, int64_t B, const SampleOptions& opt,
                              Generator& gen);

}  // namespace ddplab::gpt
