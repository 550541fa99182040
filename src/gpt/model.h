// A tiny GPT, karpathy/nanoGPT's model.py as it runs under torch 1.13 (no scaled_dot_product_attention:
// the explicit attention path), with explicit forward and backward over float32 buffers. Every kernel is
// torch's own CPU arithmetic at one thread (src/nn/, src/gemm.h, src/loss.h), so losses and gradients are
// PyTorch's bits.
//
// Modules and state_dict names (construction order, which is also the generator's draw order):
//   transformer.wte (Embedding V x C), transformer.wpe (Embedding block x C), transformer.drop,
//   transformer.h.<i>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, transformer.ln_f,
//   lm_head (Linear C -> V, no bias, its weight IS transformer.wte.weight), aux_head (ours, optional).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/gpt/config.h"
#include "src/nn/activations.h"
#include "src/tensor.h"
#include "src/torch_rng.h"

namespace ddplab::gpt {


// One forward's saved tensors, per block (the backward reads them).
struct BlockActs;

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
  Parameter* aux_head_weight() { return aux_head_ ? aux_head_.get() : nullptr; }
  void train(bool mode = true) { training_ = mode; }
  bool training() const { return training_; }
  const GptConfig& config() const { return cfg_; }
  const Matrix& logits() const { return logits_; }  // the last forward's [B*T, V]

 private:
  struct Dense {  // nn.Linear(in, out, bias) applied to rows
    Parameter weight, bias;
    bool has_bias = false;
    int64_t in = 0, out = 0;
  };
  struct Norm {  // nanoGPT's LayerNorm(ndim, bias)
    Parameter weight, bias;
    bool has_bias = false;
  };
  struct Block {
    Norm ln_1, ln_2;
    Dense c_attn, attn_proj, c_fc, mlp_proj;
  };

  void dense_forward(const Dense& d, const float* x, float* y, int64_t rows) const;
  // dx (nullable) = dy W; grads of W (and b) accumulated as autograd does; bias then weight become ready.
  void dense_backward(Dense& d, const float* dy, const float* x, float* dx, int64_t rows,
                      std::vector<Parameter*>& ready);
  void norm_forward(const Norm& n, const float* x, float* y, float* mean, float* rstd, int64_t rows) const;
  void norm_backward(Norm& n, const float* dy, const float* x, const float* mean, const float* rstd, float* dx,
                     int64_t rows, std::vector<Parameter*>& ready);

  GptConfig cfg_;
  bool training_ = true;
  Parameter wte_, wpe_;
  std::vector<Block> blocks_;
  Norm ln_f_;
  std::unique_ptr<Parameter> aux_head_;

  // The last forward's shapes and saved tensors.
  int64_t B_ = 0, T_ = 0;
  bool used_aux_ = false;
  std::vector<int64_t> idx_, targets_;
  std::vector<float> drop_mask_;  // transformer.drop's noise (empty: identity)
  std::vector<std::unique_ptr<BlockActs>> acts_;
  std::vector<float> x_final_, lnf_out_, lnf_mean_, lnf_rstd_;
  Matrix logits_, logits_aux_;
  Matrix dlogits_, dlogits_aux_;     // d loss / d logits for grad_output 1, from the forward's cross_entropy
  std::vector<float> grad_scratch_;  // dense_backward's weight gradient before it is accumulated
};

}  // namespace ddplab::gpt
