// nanoGPT's CausalSelfAttention over Linear, Dropout and src/nn/attention.h (see attention.h).
#include "src/model/attention.h"

#include <stdexcept>

#include <fmt/format.h>

namespace ddplab {

CausalSelfAttention::CausalSelfAttention(int64_t n_embd, int64_t n_head, int64_t block_size, double dropout,
                                         bool bias, const std::string& prefix, Generator& gen, bool draw)
    : c_attn(n_embd, 3 * n_embd, prefix + ".c_attn", gen, draw, bias),
      c_proj(n_embd, n_embd, prefix + ".c_proj", gen, draw, bias),
      attn_dropout(dropout, gen),
      resid_dropout(dropout, gen),
      n_embd_(n_embd),
      n_head_(n_head),
      block_size_(block_size),
      p_(dropout),
      gen_(&gen) {
  if (n_head <= 0 || n_embd % n_head != 0) throw std::invalid_argument("CausalSelfAttention: n_embd % n_head != 0");
  mask = {prefix + ".bias", {1, 1, block_size, block_size}, Matrix::Zero(block_size, block_size)};
  mask.value.triangularView<Eigen::Lower>().setOnes();
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  if (x.shape.size() != 3 || x.shape[2] != n_embd_ || x.shape[1] > block_size_) {
    throw std::invalid_argument(fmt::format("{} got input [{}]", repr(), fmt::join(x.shape, ", ")));
  }
  const int64_t B = x.shape[0], T = x.shape[1];
  const Tensor qkv = c_attn.forward(x);
  Tensor y = Tensor::empty(x.shape);
  // attn_dropout is applied inside the core (on the softmax's output), from the same generator.
  nn::causal_attention_forward(qkv.data(), B, T, n_embd_, n_head_, p_, training_, *gen_, y.data(), cache_);
  return resid_dropout.forward(c_proj.forward(y));
}

Tensor CausalSelfAttention::backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) {
  const Tensor g = c_proj.backward(resid_dropout.backward(grad_out, true, ready), true, ready);
  Tensor dqkv = Tensor::empty({cache_.B, cache_.T, 3 * n_embd_});
  nn::causal_attention_backward(g.data(), cache_, dqkv.data());
  return c_attn.backward(dqkv, need_grad_input, ready);
}

std::vector<std::string> CausalSelfAttention::state_dict_keys() {
  std::vector<std::string> keys{mask.name};
  for (Module* c : children()) {
    for (std::string& k : c->state_dict_keys()) keys.push_back(std::move(k));
  }
  return keys;
}

void CausalSelfAttention::set_generator(Generator& gen) {
  gen_ = &gen;
  Module::set_generator(gen);
}

std::string CausalSelfAttention::repr() const {
  return fmt::format("CausalSelfAttention(n_embd={}, n_head={}, block_size={}, dropout={})", n_embd_, n_head_,
                     block_size_, p_);
}

}  // namespace ddplab
