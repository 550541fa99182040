// nanoGPT's CausalSelfAttention as a container Module: c_attn (Linear C -> 3C), the causal mask buffer
// `bias` (tril of ones [1, 1, block_size, block_size]), the attention core of src/nn/attention.h with its
// attn_dropout, c_proj (Linear C -> C) and resid_dropout; torch 1.13's explicit path (no
// scaled_dot_product_attention), bit for bit. Children in registration order: c_attn, c_proj,
// attn_dropout, resid_dropout (attn_dropout's mask is drawn inside the core, so it holds only p).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/module.h"
#include "src/model/norm.h"
#include "src/model/linear.h"
#include "src/nn/attention.h"
#include "src/data/torch_rng.h"

namespace ddplab {

class CausalSelfAttention : public Module {
 public:
  // Constructs c_attn then c_proj (reset_parameters draws from gen in that order, none when draw is false).
  CausalSelfAttention(int64_t n_embd, int64_t n_head, int64_t block_size, double dropout, bool bias,
                      const std::string& prefix, Generator& gen, bool draw = true);

  // x [B, T, C] (T <= block_size) -> [B, T, C].
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) override;
  std::vector<Module*> children() override { return {&c_attn, &c_proj, &attn_dropout, &resid_dropout}; }
  std::vector<Buffer*> buffers() override { return {&mask}; }
  using Module::buffers;
  using Module::parameters;
  // The module's own buffer (`<prefix>.bias`) before its children's parameters, as state_dict lists them.
  std::vector<std::string> state_dict_keys() override;
  void set_generator(Generator& gen) override;
  std::string repr() const override;

  Linear c_attn, c_proj;
  Dropout attn_dropout, resid_dropout;
  Buffer mask;  // "<prefix>.bias": the causal mask

 private:
  int64_t n_embd_, n_head_, block_size_;
  double p_;
  Generator* gen_;
  nn::AttentionCache cache_;
};

}  // namespace ddplab
