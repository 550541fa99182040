// nanoGPT's GPTConfig (model.py), the tiny GPT's shape: a plain struct, so the one flag table (src/ddp/config.h)
// can hold it without depending on the model.
#pragma once

#include <cstdint>

#include "src/nn/activations.h"

namespace ddplab::gpt {

struct GptConfig {
  int64_t vocab_size = 0;
  int64_t block_size = 16;
  int64_t n_layer = 2;
  int64_t n_head = 2;
  int64_t n_embd = 32;
  double dropout = 0.0;
  bool bias = true;  // Linear and LayerNorm biases (nanoGPT's bias=False drops them all)
  nn::GeluApproximate gelu = nn::GeluApproximate::kNone;
  int64_t aux_head_every = 0;  // > 0: an aux_head Linear(C, V, bias=False), used on steps % K == 0
};

// One replica's parameter count (the tied weight once; the aux head when there is one).
inline int64_t gpt_parameter_count(const GptConfig& m, int64_t vocab_size) {
  const int64_t C = m.n_embd, b = m.bias ? 1 : 0;
  // Per block: ln_1, c_attn (C -> 3C), attn.c_proj (C -> C), ln_2, c_fc (C -> 4C), mlp.c_proj (4C -> C).
  const int64_t block =
      (C + b * C) * 2 + (3 * C * C + b * 3 * C) + (C * C + b * C) + (4 * C * C + b * 4 * C) + (4 * C * C + b * C);
  const int64_t heads = m.aux_head_every > 0 ? 2 : 1;  // lm_head is tied to wte: one parameter
  return vocab_size * C * heads + m.block_size * C + m.n_layer * block + C + b * C;
}

}  // namespace ddplab::gpt
