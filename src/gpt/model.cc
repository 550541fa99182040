#include "src/gpt/model.h"

#include <cmath>
#include <stdexcept>

#include "src/train/loss.h"
#include "src/model/attention.h"
#include "src/model/embedding.h"
#include "src/model/norm.h"
#include "src/model/residual.h"
#include "src/model/linear.h"
#include "src/tensor/torch_sum.h"

namespace ddplab::gpt {

namespace {

constexpr double kLayerNormEps = 1e-5;  // nanoGPT's LayerNorm: F.layer_norm(..., 1e-5)

// nanoGPT's MLP: c_fc (C -> 4C), GELU, c_proj (4C -> C), dropout.
std::unique_ptr<Module> make_mlp(const GptConfig& cfg, const std::string& prefix, Generator& gen, bool draw) {
  const int64_t C = cfg.n_embd;
  auto mlp = std::make_unique<Sequential>(prefix);
  mlp->push_back(std::make_unique<Linear>(C, 4 * C, prefix + ".c_fc", gen, draw, cfg.bias));
  mlp->push_back(std::make_unique<Activation>(cfg.gelu == nn::GeluApproximate::kTanh ? Activation::Kind::gelu_tanh
                                                                                      : Activation::Kind::gelu));
  mlp->push_back(std::make_unique<Linear>(4 * C, C, prefix + ".c_proj", gen, draw, cfg.bias));
  mlp->push_back(std::make_unique<Dropout>(cfg.dropout, gen));
  return mlp;
}

// nanoGPT's Block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)). Constructed ln_1, attn, ln_2, mlp.
std::unique_ptr<Module> make_block(const GptConfig& cfg, const std::string& prefix, Generator& gen, bool draw) {
  auto attn_branch = std::make_unique<Sequential>();
  attn_branch->push_back(std::make_unique<LayerNorm>(cfg.n_embd, kLayerNormEps, prefix + ".ln_1", cfg.bias));
  attn_branch->push_back(std::make_unique<CausalSelfAttention>(cfg.n_embd, cfg.n_head, cfg.block_size, cfg.dropout,
                                                               cfg.bias, prefix + ".attn", gen, draw));
  auto mlp_branch = std::make_unique<Sequential>();
  mlp_branch->push_back(std::make_unique<LayerNorm>(cfg.n_embd, kLayerNormEps, prefix + ".ln_2", cfg.bias));
  mlp_branch->push_back(make_mlp(cfg, prefix + ".mlp", gen, draw));
  auto block = std::make_unique<Sequential>(prefix);
  block->push_back(std::make_unique<Residual>(std::move(attn_branch)));
  block->push_back(std::make_unique<Residual>(std::move(mlp_branch)));
  return block;
}

// A [rows * cols] Matrix seen as [rows, cols] (the same floats: a view(-1, cols)).
Matrix as_rows(Matrix m, int64_t cols) {
  const int64_t rows = m.size() / cols;
  m.resize(rows, cols);  // the same number of floats: Eigen keeps the storage
  return m;
}

}  // namespace

// GPT.transformer (wte, wpe, drop, h, ln_f) with GPT.forward up to ln_f: tok_emb + pos_emb, drop, the
// blocks, ln_f.
class Transformer : public Module {
 public:
  Transformer(const GptConfig& cfg, Generator& gen, bool draw)
      : wte(cfg.vocab_size, cfg.n_embd, "transformer.wte", gen, draw),
        wpe(cfg.block_size, cfg.n_embd, "transformer.wpe", gen, draw),
        drop(cfg.dropout, gen),
        h("transformer.h"),
        ln_f(cfg.n_embd, kLayerNormEps, "transformer.ln_f", cfg.bias) {
    for (int64_t i = 0; i < cfg.n_layer; ++i) h.push_back(make_block(cfg, h.next_name(), gen, draw));
  }

  Tensor forward(const Tensor&) override { throw std::logic_error("GPT.transformer takes token ids"); }

  // idx [B, T] -> ln_f's output [B, T, C].
  Tensor forward_ids(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) override {
    const int64_t B = shape.at(0), T = shape.at(1);
    Tensor x = wte.forward_ids(idx, {B, T});
    std::vector<int64_t> arange(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) arange[static_cast<size_t>(t)] = t;
    const Tensor pos = wpe.forward_ids(arange, {T});
    // tok_emb + pos_emb, pos_emb broadcast over the batch.
    const int64_t TC = pos.numel();
    float* xd = x.data();
    const float* pd = pos.data();
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < TC; ++i) xd[b * TC + i] += pd[i];
    }
    return ln_f.forward(h.forward(drop.forward(x)));
  }

  // Returns no gradient: the input is token ids.
  Tensor backward(const Tensor& grad_out, bool, std::vector<Parameter*>& ready) override {
    const Tensor g = drop.backward(h.backward(ln_f.backward(grad_out, true, ready), true, ready), true, ready);
    // The add's two inputs: pos_emb's lookup came later in the forward, so wpe's gradient is ready first
    // (the sum over the batch, sum_to_size); then wte's.
    const int64_t B = g.shape.at(0), T = g.shape.at(1), C = g.shape.at(2);
    Tensor dpos = Tensor::empty({T, C});
    torch_sum_dim0(g.data(), dpos.data(), B, T * C);
    wpe.backward(dpos, false, ready);
    wte.backward(g, false, ready);
    return Tensor();
  }

  std::vector<Module*> children() override { return {&wte, &wpe, &drop, &h, &ln_f}; }
  std::string repr() const override { return "ModuleDict(wte, wpe, drop, h, ln_f)"; }

  Embedding wte, wpe;
  Dropout drop;
  Sequential h;  // nn.ModuleList of Blocks, run in order
  LayerNorm ln_f;
};

// nanoGPT's GPT: transformer, lm_head (tied to transformer.wte) and our optional aux_head.
class GptModule : public Module {
 public:
  GptModule(const GptConfig& cfg, Generator& gen, bool draw)
      : transformer(cfg, gen, draw), lm_head(cfg.n_embd, cfg.vocab_size, "lm_head", gen, draw, /*bias=*/false) {
    if (cfg.aux_head_every > 0) {
      aux_head = std::make_unique<Linear>(cfg.n_embd, cfg.vocab_size, "aux_head", gen, draw, /*bias=*/false);
    }
    lm_head.tie_weight(transformer.wte.weight);  // after lm_head's own draw, as nanoGPT ties after building it
  }

  Tensor forward(const Tensor&) override { throw std::logic_error("GPT takes token ids"); }

  // idx [B, T] -> lm_head's logits [B, T, V]; the hidden state stays for aux_logits().
  Tensor forward_ids(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) override {
    hidden_ = transformer.forward_ids(idx, shape);
    return lm_head.forward(hidden_);
  }
  // The aux head on the last forward's hidden state (created after the lm_head's logits).
  Tensor aux_logits() { return aux_head->forward(hidden_); }

  Tensor backward(const Tensor& dlogits, bool, std::vector<Parameter*>& ready) override {
    return backward_heads(dlogits, nullptr, ready);
  }
  // Both heads' gradients: the aux head's (created last, so run first), the lm_head's, their sum into ln_f.
  Tensor backward_heads(const Tensor& dlogits, const Tensor* dlogits_aux, std::vector<Parameter*>& ready) {
    Tensor d_aux;
    if (dlogits_aux != nullptr) d_aux = aux_head->backward(*dlogits_aux, true, ready);
    Tensor d = lm_head.backward(dlogits, true, ready);
    if (dlogits_aux != nullptr) {
      float* o = d.data();
      const float* a = d_aux.data();
      for (int64_t i = 0; i < d.numel(); ++i) o[i] = o[i] + a[i];
    }
    return transformer.backward(d, false, ready);
  }

  std::vector<Module*> children() override {
    if (aux_head) return {&transformer, &lm_head, aux_head.get()};
    return {&transformer, &lm_head};
  }
  std::string repr() const override { return "GPT"; }

  Transformer transformer;
  Linear lm_head;
  std::unique_ptr<Linear> aux_head;

 private:
  Tensor hidden_;
};

namespace {

// nanoGPT's self.apply(self._init_weights) (children before parents): Linear weight normal_(0, 0.02) and
// bias zeros_, Embedding weight normal_(0, 0.02); the tied weight is drawn as wte's and again as lm_head's.
// Then every '*c_proj.weight' in named_parameters order: normal_(0, 0.02 / sqrt(2 * n_layer)).
void init_weights(GptModule& model, const GptConfig& cfg, Generator& gen) {
  apply(model, [&gen](Module& m) {
    if (auto* l = dynamic_cast<Linear*>(&m)) {
      Parameter& w = l->effective_weight();
      gen.normal_(w.data(), w.numel(), 0.0, 0.02);
      if (l->has_bias()) l->bias.value.setZero();
    } else if (auto* e = dynamic_cast<Embedding*>(&m)) {
      gen.normal_(e->weight.data(), e->weight.numel(), 0.0, 0.02);
    }
  });
  const double std_proj = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.n_layer));
  const std::string suffix = "c_proj.weight";
  for (Parameter* p : model.parameters()) {
    const std::string& n = p->name;
    if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
      gen.normal_(p->data(), p->numel(), 0.0, std_proj);
    }
  }
}

}  // namespace

Gpt::Gpt(const GptConfig& cfg, Generator& gen, bool draw) : cfg_(cfg) {
  const int64_t C = cfg.n_embd, V = cfg.vocab_size;
  if (V <= 0 || C <= 0 || cfg.n_head <= 0 || C % cfg.n_head != 0 || cfg.block_size <= 0 || cfg.n_layer <= 0) {
    throw std::invalid_argument("Gpt: bad configuration");
  }
  // Construction, in __init__'s order: Embedding draws normal_(0, 1); Linear kaiming/uniform; LayerNorm none.
  root_ = std::make_unique<GptModule>(cfg, gen, draw);
  if (draw) init_weights(*root_, cfg, gen);
}

Gpt::~Gpt() = default;

Module& Gpt::module() { return *root_; }

std::vector<Parameter*> Gpt::parameters() { return root_->parameters(); }

std::vector<std::string> Gpt::state_dict_keys() { return root_->state_dict_keys(); }

Parameter* Gpt::aux_head_weight() { return root_->aux_head ? &root_->aux_head->weight : nullptr; }

void Gpt::train(bool mode) {
  training_ = mode;
  root_->train(mode);
}

float Gpt::forward(const std::vector<int64_t>& idx, const std::vector<int64_t>& targets, int64_t B, int64_t T,
                   bool use_aux, Generator& gen) {
  const int64_t V = cfg_.vocab_size;
  if (T > cfg_.block_size) throw std::invalid_argument("Gpt: sequence longer than block_size");
  GraphScope graph(*root_);
  root_->set_generator(gen);  // dropout masks from the caller's generator, in program order
  B_ = B;
  T_ = T;
  targets_ = targets;
  used_aux_ = use_aux && root_->aux_head != nullptr;

  // logits = lm_head(x); loss = cross_entropy over the flattened logits (and the aux head's, added).
  logits_ = as_rows(std::move(root_->forward_ids(idx, {B, T}).value), V);
  LossResult ce = cross_entropy(logits_, targets, 1.0f);
  dlogits_ = std::move(ce.grad);
  float loss = ce.loss;
  if (used_aux_) {
    logits_aux_ = as_rows(std::move(root_->aux_logits().value), V);
    LossResult ce_aux = cross_entropy(logits_aux_, targets, 1.0f);
    dlogits_aux_ = std::move(ce_aux.grad);
    loss = loss + ce_aux.loss;
  }
  return loss;
}

void Gpt::backward(float grad_output, std::vector<Parameter*>& ready) {
  const int64_t M = B_ * T_, V = cfg_.vocab_size;
  // d loss / d logits: the forward's (grad_output 1) or, under accumulation, nll_loss_backward's
  // -(grad_output / N) through the same log_softmax backward.
  auto dlogits = [&](const Matrix& logits, const Matrix& at_one) {
    return Tensor({M, V}, grad_output == 1.0f ? at_one : cross_entropy(logits, targets_, grad_output).grad);
  };
  const Tensor d = dlogits(logits_, dlogits_);
  if (used_aux_) {
    const Tensor d_aux = dlogits(logits_aux_, dlogits_aux_);
    root_->backward_heads(d, &d_aux, ready);
  } else {
    root_->backward_heads(d, nullptr, ready);
  }
}

}  // namespace ddplab::gpt
