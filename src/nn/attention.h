// nanoGPT's causal self-attention core as it runs under torch 1.13 on CPU (no scaled_dot_product_attention):
// everything between c_attn's output and c_proj's input, forward and backward, bit for bit:
//
//   q, k, v = qkv.split(C, dim=2); each .view(B, T, nh, hs).transpose(1, 2)
//   att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
//   att = att.masked_fill(bias[:, :, :T, :T] == 0, float('-inf'))
//   att = F.softmax(att, dim=-1); att = attn_dropout(att)
//   y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
//
// Kernels, in order (see bmm.h, softmax.h, dropout.h for each one's arithmetic):
// - q @ k^T: at::matmul -> reshape to [B*nh, T, hs] and [B*nh, hs, T] (views when B == 1 or nh == 1, copies
//   otherwise) -> at::bmm (naive loop below 400 multiply-adds per item, else sgemm per item, transposes from
//   the strides).
// - * scale: mul with a wrapped Python float: the double 1/sqrt(hs) rounded to float, one float multiply.
// - masked_fill: -inf above the diagonal. softmax: _vec_softmax_lastdim (Sleef exp), exact 0 where -inf.
// - attention Dropout: nn.Dropout's bernoulli_ mask from gen (training and p > 0 only; p == 0 and eval draw
//   nothing and pass the tensor through), att * noise.
// - att @ v: as q @ k^T. The transpose back and .contiguous() only move data.
// Backward (autograd's graph for that code): BmmBackward0 for both products (grad @ b^T, a^T @ grad with the
// saved views' strides), MulBackward0 (grad * noise), _softmax_backward_data, masked_fill(mask, 0),
// MulBackward0 (grad * float scale); split/view/transpose backward only place the three gradients in dqkv.
#pragma once

#include <cstdint>
#include <vector>

#include "src/data/torch_rng.h"

namespace ddplab::nn {

// What the backward needs. Owned copies: the caller's buffers may change after the forward.
struct AttentionCache {
  int64_t B = 0, T = 0, C = 0, n_head = 0;
  float scale = 0;                 // float(1.0 / sqrt(hs))
  std::vector<float> qkv;          // [B, T, 3C], the forward's input
  std::vector<float> att;          // [B, nh, T, T], softmax's output
  std::vector<float> noise;        // [B, nh, T, T], the dropout mask; empty when dropout was the identity
  std::vector<float> att_dropped;  // att * noise (the operand of @ v); empty when dropout was the identity
};

// qkv: [B, T, 3C] contiguous (c_attn's output); y: [B, T, C] contiguous (before c_proj). Attention dropout
// with p draws its mask from gen (as nn.Dropout does) when training and p > 0. p is a double, as nn.Dropout
// keeps it: float(0.1) would give another keep threshold. Throws std::invalid_argument on bad sizes or p.
void causal_attention_forward(const float* qkv, int64_t B, int64_t T, int64_t C, int64_t n_head, double dropout_p,
                              bool training, Generator& gen, float* y, AttentionCache& cache);

// dy: [B, T, C]; writes dqkv: [B, T, 3C] (dq, dk, dv side by side, as SplitBackward concatenates them).
void causal_attention_backward(const float* dy, const AttentionCache& cache, float* dqkv);

}  // namespace ddplab::nn
