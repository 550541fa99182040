// A tiny GPT, karpathy/nanoGPT's model.py as it runs under torch 1.13 (no scaled_dot_product_attention:
// the explicit attention path), built from src/model's Modules: Embedding, LayerNorm, CausalSelfAttention,
// Linear, Activation (GELU), Dropout, Residual and Sequential. Every kernel is torch's own CPU arithmetic
// at one thread (src/nn/, src/tensor/gemm.h, src/train/loss.h), so losses and gradients are PyTorch's bits; the order
// gradients become ready (DDP's buckets) follows from the tree (src/model/autograd.h). What is nanoGPT's
// own stays here: GPT.forward's composition and loss, _init_weights and the c_proj re-init.
//
// The Module tree and its state_dict names (construction order, which is also the generator's draw order):
//   transformer.wte (Embedding V x C), transformer.wpe (Embedding block x C), transformer.drop,
//   transformer.h.<i> = Residual(ln_1, attn{c_attn, bias buffer, c_proj}), Residual(ln_2, mlp{c_fc, gelu,
//   c_proj, dropout}), transformer.ln_f, lm_head (Linear C -> V, no bias, its weight IS
//   transformer.wte.weight: one Parameter), aux_head (ours, optional).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/gpt/config.h"
#include "src/model/module.h"
#include "src/nn/activations.h"
#include "src/tensor/tensor.h"
#include "src/data/torch_rng.h"

namespace ddplab::gpt {

// nanoGPT's GPT module (transformer, lm_head, aux_head): defined in model.cc.
class GptModule;

class Gpt {
 public:
  // nanoGPT's GPT(config) after torch.manual_seed: every layer's reset_parameters draws at construction,
  // then apply(_init_weights) and the c_proj re-initialisation, all from `gen`. With draw false nothing is
  // drawn and every parameter is zero (a copy fills them).
  Gpt(const GptConfig& cfg, Generator& gen, bool draw = true);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  // logits, loss = model(idx, targets) for idx, targets [B, T] (T <= block_size), with the aux head's
  // loss added when use_aux. Dropout masks are drawn from `gen` in program order when training.
  float forward(const std::vector<int64_t>& idx, const std::vector<int64_t>& targets, int64_t B, int64_t T,
                bool use_aux, Generator& gen);
  // loss.backward() with d loss = grad_output (1/K under accumulation): every used parameter's grad is
  // assigned or accumulated (autograd's rule); `ready` gets each in the order its AccumulateGrad runs.
  void backward(float grad_output, std::vector<Parameter*>& ready);

  // model.parameters(): named_parameters order, the tied weight once (transformer.wte.weight).
  std::vector<Parameter*> parameters();
  // model.state_dict().keys(): each module's own parameters and buffers before its children's, so the
  // causal mask buffer transformer.h.<i>.attn.bias precedes attn.c_attn; the tied weight twice (as
  // transformer.wte.weight and lm_head.weight).
  std::vector<std::string> state_dict_keys();
  // The aux head's weight, or nullptr.
  Parameter* aux_head_weight();
  void train(bool mode = true);
  bool training() const { return training_; }
  const GptConfig& config() const { return cfg_; }
  const Matrix& logits() const { return logits_; }  // the last forward's [B*T, V]
  // The Module tree (GPT(config) as torch holds it).
  Module& module();

 private:
  GptConfig cfg_;
  bool training_ = true;
  std::unique_ptr<GptModule> root_;

  // The last forward's targets, logits and d loss / d logits for grad_output 1 (from its cross_entropy).
  int64_t B_ = 0, T_ = 0;
  bool used_aux_ = false;
  std::vector<int64_t> targets_;
  Matrix logits_, logits_aux_;
  Matrix dlogits_, dlogits_aux_;
};

}  // namespace ddplab::gpt
