#include "src/gpt/model.h"

#include <cmath>
#include <stdexcept>

#include "src/kernels.h"
#include "src/loss.h"
#include "src/nn/attention.h"
#include "src/nn/dropout.h"
#include "src/nn/embedding.h"
#include "src/nn/layernorm.h"
#include "src/torch_sum.h"

namespace ddplab::gpt {

struct BlockActs {
  std::vector<float> x;  // the block's input [M, C]
  std::vector<float> ln1, ln1_mean, ln1_rstd;
  std::vector<float> qkv, att_y;  // c_attn's output [M, 3C], attention's output [M, C]
  nn::AttentionCache att;
  std::vector<float> resid_mask;  // attn's resid_dropout noise (empty: identity)
  std::vector<float> x2;          // x + attn(...) [M, C]
  std::vector<float> ln2, ln2_mean, ln2_rstd;
  std::vector<float> fc, gelu;  // c_fc's output and GELU's [M, 4C]
  std::vector<float> mlp_mask;  // mlp.dropout's noise
};

namespace {

const LinearKernels& kernels() { return cpu_kernels(Kernels::fast); }

Parameter make_param(const std::string& name, std::vector<int64_t> shape) {
  Parameter p;
  p.name = name;
  p.shape = shape;
  const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
  p.value = Matrix::Zero(rows, cols);
  return p;
}

// kaiming_uniform_(W, a=sqrt(5)) then uniform_(b): what nn.Linear's reset_parameters draws (src/nn.cc).
void linear_reset_draws(Parameter& w, Parameter* b, int64_t in, Generator& gen) {
  const double gain = std::sqrt(2.0 / (1.0 + 5.000000000000001));
  const double bound = std::sqrt(3.0) * (gain / std::sqrt(static_cast<double>(in)));
  gen.uniform_(w.data(), w.numel(), -bound, bound);
  if (b != nullptr) {
    const double bb = 1.0 / std::sqrt(static_cast<double>(in));
    gen.uniform_(b->data(), b->numel(), -bb, bb);
  }
}

// Dropout over n floats: draws the mask into `mask` (left empty when dropout is the identity) and applies it.
void dropout_inplace(float* x, int64_t n, double p, bool train, Generator& gen, std::vector<float>& mask) {
  // The mask's memory only when dropout draws one (p > 0 in training); with n = 0 dropout_mask still checks p.
  const int64_t n_mask = train && p > 0 ? n : 0;
  mask.resize(static_cast<size_t>(n_mask));
  if (!nn::dropout_mask(mask.data(), n_mask, p, train, gen)) {
    mask.clear();
    return;
  }
  nn::dropout_forward(x, mask.data(), x, n);
}

void dropout_grad_inplace(float* g, int64_t n, const std::vector<float>& mask) {
  if (!mask.empty()) nn::dropout_backward(g, mask.data(), g, n);
}

void accumulate(Parameter& p, const float* g) {
  Eigen::Map<const Matrix> m(g, p.value.rows(), p.value.cols());
  p.accumulate_grad(m);
}

}  // namespace

Gpt::Gpt(const GptConfig& cfg, Generator& gen, bool draw) : cfg_(cfg) {
  const int64_t C = cfg.n_embd, V = cfg.vocab_size;
  if (V <= 0 || C <= 0 || cfg.n_head <= 0 || C % cfg.n_head != 0 || cfg.block_size <= 0 || cfg.n_layer <= 0) {
    throw std::invalid_argument("Gpt: bad configuration");
  }
  // Construction, in __init__'s order: Embedding draws normal_(0, 1); Linear kaiming/uniform; LayerNorm none.
  wte_ = make_param("transformer.wte.weight", {V, C});
  wpe_ = make_param("transformer.wpe.weight", {cfg.block_size, C});
  if (draw) gen.normal_(wte_.data(), wte_.numel());
  if (draw) gen.normal_(wpe_.data(), wpe_.numel());
  auto make_norm = [&](const std::string& name) {
    Norm n;
    n.weight = make_param(name + ".weight", {C});
    n.weight.value.setOnes();
    n.has_bias = cfg.bias;
    if (cfg.bias) n.bias = make_param(name + ".bias", {C});
    return n;
  };
  auto make_dense = [&](const std::string& name, int64_t in, int64_t out, bool bias) {
    Dense d;
    d.in = in;
    d.out = out;
    d.has_bias = bias;
    d.weight = make_param(name + ".weight", {out, in});
    if (bias) d.bias = make_param(name + ".bias", {out});
    if (draw) linear_reset_draws(d.weight, bias ? &d.bias : nullptr, in, gen);
    return d;
  };
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    const std::string h = "transformer.h." + std::to_string(i);
    Block b;
    b.ln_1 = make_norm(h + ".ln_1");
    b.c_attn = make_dense(h + ".attn.c_attn", C, 3 * C, cfg.bias);
    b.attn_proj = make_dense(h + ".attn.c_proj", C, C, cfg.bias);
    b.ln_2 = make_norm(h + ".ln_2");
    b.c_fc = make_dense(h + ".mlp.c_fc", C, 4 * C, cfg.bias);
    b.mlp_proj = make_dense(h + ".mlp.c_proj", 4 * C, C, cfg.bias);
    blocks_.push_back(std::move(b));
  }
  ln_f_ = make_norm("transformer.ln_f");
  // lm_head = Linear(C, V, bias=False): its own kaiming draw, then its weight is replaced by wte's (tied).
  Parameter lm_draw = make_param("lm_head.weight", {V, C});
  if (draw) linear_reset_draws(lm_draw, nullptr, C, gen);
  if (cfg.aux_head_every > 0) {
    aux_head_ = std::make_unique<Parameter>(make_param("aux_head.weight", {V, C}));
    if (draw) linear_reset_draws(*aux_head_, nullptr, C, gen);
  }
  if (!draw) return;

  // self.apply(_init_weights): children before parents, so in module order; Linear weight normal_(0, 0.02)
  // and bias zeros_, Embedding weight normal_(0, 0.02). lm_head comes after transformer: it draws the tied
  // weight again, overwriting wte's draw.
  auto init_dense = [&](Dense& d) {
    gen.normal_(d.weight.data(), d.weight.numel(), 0.0, 0.02);
    if (d.has_bias) d.bias.value.setZero();
  };
  gen.normal_(wte_.data(), wte_.numel(), 0.0, 0.02);
  gen.normal_(wpe_.data(), wpe_.numel(), 0.0, 0.02);
  for (Block& b : blocks_) {
    init_dense(b.c_attn);
    init_dense(b.attn_proj);
    init_dense(b.c_fc);
    init_dense(b.mlp_proj);
  }
  gen.normal_(wte_.data(), wte_.numel(), 0.0, 0.02);  // lm_head.weight, the same tensor
  if (aux_head_) gen.normal_(aux_head_->data(), aux_head_->numel(), 0.0, 0.02);
  // Then every '*c_proj.weight' in named_parameters order: normal_(0, 0.02 / sqrt(2 * n_layer)).
  const double std_proj = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.n_layer));
  for (Block& b : blocks_) {
    gen.normal_(b.attn_proj.weight.data(), b.attn_proj.weight.numel(), 0.0, std_proj);
    gen.normal_(b.mlp_proj.weight.data(), b.mlp_proj.weight.numel(), 0.0, std_proj);
  }
}

Gpt::~Gpt() = default;

std::vector<Parameter*> Gpt::parameters() {
  std::vector<Parameter*> ps{&wte_, &wpe_};
  auto norm = [&](Norm& n) {
    ps.push_back(&n.weight);
    if (n.has_bias) ps.push_back(&n.bias);
  };
  auto dense = [&](Dense& d) {
    ps.push_back(&d.weight);
    if (d.has_bias) ps.push_back(&d.bias);
  };
  for (Block& b : blocks_) {
    norm(b.ln_1);
    dense(b.c_attn);
    dense(b.attn_proj);
    norm(b.ln_2);
    dense(b.c_fc);
    dense(b.mlp_proj);
  }
  norm(ln_f_);
  if (aux_head_) ps.push_back(aux_head_.get());
  return ps;
}

std::vector<std::string> Gpt::state_dict_keys() {
  std::vector<std::string> keys{wte_.name, wpe_.name};
  auto norm = [&](const Norm& n) {
    keys.push_back(n.weight.name);
    if (n.has_bias) keys.push_back(n.bias.name);
  };
  auto dense = [&](const Dense& d) {
    keys.push_back(d.weight.name);
    if (d.has_bias) keys.push_back(d.bias.name);
  };
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    norm(b.ln_1);
    keys.push_back("transformer.h." + std::to_string(i) + ".attn.bias");  // the attention's own buffer first
    dense(b.c_attn);
    dense(b.attn_proj);
    norm(b.ln_2);
    dense(b.c_fc);
    dense(b.mlp_proj);
  }
  norm(ln_f_);
  keys.push_back("lm_head.weight");
  if (aux_head_) keys.push_back(aux_head_->name);
  return keys;
}

void Gpt::dense_forward(const Dense& d, const float* x, float* y, int64_t rows) const {
  // F.linear: addmm(bias, x, W^T) with a bias; matmul(x, W^T) without (beta 0): y starts from zero, and
  // 0 + s equals s in every bit but a zero's sign.
  std::vector<float> zero_bias;
  const float* bias = d.has_bias ? d.bias.data() : nullptr;
  if (bias == nullptr) {
    zero_bias.assign(static_cast<size_t>(d.out), 0.0f);
    bias = zero_bias.data();
  }
  kernels().forward(x, d.weight.data(), bias, y, rows, d.in, d.out);
}

void Gpt::dense_backward(Dense& d, const float* dy, const float* x, float* dx, int64_t rows,
                         std::vector<Parameter*>& ready) {
  if (dx != nullptr) kernels().grad_input(dy, d.weight.data(), dx, rows, d.in, d.out);
  // grad_weight overwrites (beta 0): a buffer kept across calls saves an allocation and its page faults.
  std::vector<float>& g = grad_scratch_;
  g.resize(static_cast<size_t>(d.weight.numel()));
  kernels().grad_weight(dy, x, g.data(), rows, d.in, d.out);
  if (d.has_bias) {  // AccumulateGrad runs the bias's before the weight's (src/nn.h)
    std::vector<float> gb(static_cast<size_t>(d.out));
    kernels().grad_bias(dy, gb.data(), rows, d.out);
    accumulate(d.bias, gb.data());
    ready.push_back(&d.bias);
  }
  accumulate(d.weight, g.data());
  ready.push_back(&d.weight);
}

void Gpt::norm_forward(const Norm& n, const float* x, float* y, float* mean, float* rstd, int64_t rows) const {
  nn::layer_norm_forward(x, n.weight.data(), n.has_bias ? n.bias.data() : nullptr, y, mean, rstd, rows, cfg_.n_embd);
}

void Gpt::norm_backward(Norm& n, const float* dy, const float* x, const float* mean, const float* rstd, float* dx,
                        int64_t rows, std::vector<Parameter*>& ready) {
  const int64_t C = cfg_.n_embd;
  std::vector<float> gw(static_cast<size_t>(C)), gb(static_cast<size_t>(C));
  nn::layer_norm_backward(dy, x, mean, rstd, n.weight.data(), dx, gw.data(), n.has_bias ? gb.data() : nullptr, rows, C);
  // NativeLayerNormBackward's outputs reach their AccumulateGrad nodes weight first, then bias.
  accumulate(n.weight, gw.data());
  ready.push_back(&n.weight);
  if (n.has_bias) {
    accumulate(n.bias, gb.data());
    ready.push_back(&n.bias);
  }
}

float Gpt::forward(const std::vector<int64_t>& idx, const std::vector<int64_t>& targets, int64_t B, int64_t T,
                   bool use_aux, Generator& gen) {
  const int64_t C = cfg_.n_embd, V = cfg_.vocab_size, M = B * T;
  if (T > cfg_.block_size) throw std::invalid_argument("Gpt: sequence longer than block_size");
  B_ = B;
  T_ = T;
  idx_ = idx;
  targets_ = targets;
  used_aux_ = use_aux && aux_head_ != nullptr;
  const double p = cfg_.dropout;

  // tok_emb + pos_emb (broadcast over the batch), then transformer.drop.
  std::vector<float> x(static_cast<size_t>(M * C)), pos(static_cast<size_t>(T * C));
  nn::embedding_forward(idx.data(), M, wte_.data(), C, x.data());
  std::vector<int64_t> arange(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) arange[static_cast<size_t>(t)] = t;
  nn::embedding_forward(arange.data(), T, wpe_.data(), C, pos.data());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < T * C; ++i) x[static_cast<size_t>(b * T * C + i)] += pos[static_cast<size_t>(i)];
  }
  dropout_inplace(x.data(), M * C, p, training_, gen, drop_mask_);

  std::vector<float> proj(static_cast<size_t>(M * C));  // each block's c_proj outputs (overwritten)
  acts_.resize(blocks_.size());
  for (size_t l = 0; l < blocks_.size(); ++l) {
    Block& blk = blocks_[l];
    if (!acts_[l]) acts_[l] = std::make_unique<BlockActs>();
    BlockActs& a = *acts_[l];
    // swap, not move: x takes the previous forward's buffer (overwritten below), so nothing is reallocated.
    a.x.swap(x);
    a.ln1.resize(static_cast<size_t>(M * C));
    a.ln1_mean.resize(static_cast<size_t>(M));
    a.ln1_rstd.resize(static_cast<size_t>(M));
    norm_forward(blk.ln_1, a.x.data(), a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), M);
    a.qkv.resize(static_cast<size_t>(M * 3 * C));
    dense_forward(blk.c_attn, a.ln1.data(), a.qkv.data(), M);
    a.att_y.resize(static_cast<size_t>(M * C));
    nn::causal_attention_forward(a.qkv.data(), B, T, C, cfg_.n_head, p, training_, gen, a.att_y.data(), a.att);
    dense_forward(blk.attn_proj, a.att_y.data(), proj.data(), M);
    dropout_inplace(proj.data(), M * C, p, training_, gen, a.resid_mask);
    a.x2.resize(static_cast<size_t>(M * C));
    for (int64_t i = 0; i < M * C; ++i)
      a.x2[static_cast<size_t>(i)] = a.x[static_cast<size_t>(i)] + proj[static_cast<size_t>(i)];

    a.ln2.resize(static_cast<size_t>(M * C));
    a.ln2_mean.resize(static_cast<size_t>(M));
    a.ln2_rstd.resize(static_cast<size_t>(M));
    norm_forward(blk.ln_2, a.x2.data(), a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), M);
    a.fc.resize(static_cast<size_t>(M * 4 * C));
    dense_forward(blk.c_fc, a.ln2.data(), a.fc.data(), M);
    a.gelu.resize(a.fc.size());
    nn::gelu_forward(a.fc.data(), a.gelu.data(), M * 4 * C, cfg_.gelu);
    dense_forward(blk.mlp_proj, a.gelu.data(), proj.data(), M);
    dropout_inplace(proj.data(), M * C, p, training_, gen, a.mlp_mask);
    x.resize(static_cast<size_t>(M * C));
    for (int64_t i = 0; i < M * C; ++i)
      x[static_cast<size_t>(i)] = a.x2[static_cast<size_t>(i)] + proj[static_cast<size_t>(i)];
  }
  x_final_ = std::move(x);
  lnf_out_.resize(static_cast<size_t>(M * C));
  lnf_mean_.resize(static_cast<size_t>(M));
  lnf_rstd_.resize(static_cast<size_t>(M));
  norm_forward(ln_f_, x_final_.data(), lnf_out_.data(), lnf_mean_.data(), lnf_rstd_.data(), M);

  // logits = lm_head(x) (the tied weight, no bias); loss = cross_entropy over the flattened logits.
  Matrix logits(M, V);
  const std::vector<float> no_bias(static_cast<size_t>(V), 0.0f);
  kernels().forward(lnf_out_.data(), wte_.data(), no_bias.data(), logits.data(), M, C, V);
  logits_ = std::move(logits);
  LossResult ce = cross_entropy(logits_, targets, 1.0f);
  dlogits_ = std::move(ce.grad);
  float loss = ce.loss;
  if (used_aux_) {
    Matrix aux(M, V);
    kernels().forward(lnf_out_.data(), aux_head_->data(), no_bias.data(), aux.data(), M, C, V);
    logits_aux_ = std::move(aux);
    LossResult ce_aux = cross_entropy(logits_aux_, targets, 1.0f);
    dlogits_aux_ = std::move(ce_aux.grad);
    loss = loss + ce_aux.loss;
  }
  return loss;
}

void Gpt::backward(float grad_output, std::vector<Parameter*>& ready) {
  const int64_t C = cfg_.n_embd, V = cfg_.vocab_size, B = B_, T = T_, M = B * T;
  const size_t MC = static_cast<size_t>(M * C);
  // d loss / d logits: the forward's (grad_output 1) or, under accumulation, nll_loss_backward's
  // -(grad_output / N) through the same log_softmax backward.
  auto dlogits = [&](const Matrix& logits, const Matrix& at_one) {
    return grad_output == 1.0f ? at_one : cross_entropy(logits, targets_, grad_output).grad;
  };
  std::vector<float> dln(MC);
  if (used_aux_) {  // created last in the forward, so its backward runs first
    const Matrix g = dlogits(logits_aux_, dlogits_aux_);
    std::vector<float> gw(static_cast<size_t>(V * C));
    kernels().grad_weight(g.data(), lnf_out_.data(), gw.data(), M, C, V);
    accumulate(*aux_head_, gw.data());
    ready.push_back(aux_head_.get());
    kernels().grad_input(g.data(), aux_head_->data(), dln.data(), M, C, V);
  }
  // lm_head: the tied weight's grad waits for the embedding's (autograd sums both, then accumulates once).
  const Matrix g = dlogits(logits_, dlogits_);
  std::vector<float> tied(static_cast<size_t>(V * C));
  kernels().grad_weight(g.data(), lnf_out_.data(), tied.data(), M, C, V);
  {
    std::vector<float> d(MC);
    kernels().grad_input(g.data(), wte_.data(), d.data(), M, C, V);
    if (used_aux_) {
      for (size_t i = 0; i < MC; ++i) dln[i] = d[i] + dln[i];
    } else {
      dln = std::move(d);
    }
  }
  std::vector<float> dx(MC);
  norm_backward(ln_f_, dln.data(), x_final_.data(), lnf_mean_.data(), lnf_rstd_.data(), dx.data(), M, ready);

  // Buffers for every block (each is overwritten before it is read), allocated once per backward.
  std::vector<float> dproj(MC), dmid, dfrom(MC), dfc, datt(MC), dqkv;
  for (size_t l = blocks_.size(); l-- > 0;) {
    Block& blk = blocks_[l];
    BlockActs& a = *acts_[l];
    // x3 = x2 + dropout(mlp(ln_2(x2))): the MLP branch first (created later in the forward).
    dproj = dx;
    dropout_grad_inplace(dproj.data(), M * C, a.mlp_mask);
    dmid.resize(a.fc.size());
    dense_backward(blk.mlp_proj, dproj.data(), a.gelu.data(), dmid.data(), M, ready);
    dfc.resize(a.fc.size());
    nn::gelu_backward(dmid.data(), a.fc.data(), dfc.data(), M * 4 * C, cfg_.gelu);
    dense_backward(blk.c_fc, dfc.data(), a.ln2.data(), dln.data(), M, ready);
    norm_backward(blk.ln_2, dln.data(), a.x2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), dfrom.data(), M, ready);
    for (size_t i = 0; i < MC; ++i) dx[i] = dx[i] + dfrom[i];  // d x2
    // x2 = x + dropout(c_proj(attention(c_attn(ln_1(x))))).
    dproj = dx;
    dropout_grad_inplace(dproj.data(), M * C, a.resid_mask);
    dense_backward(blk.attn_proj, dproj.data(), a.att_y.data(), datt.data(), M, ready);
    dqkv.resize(a.qkv.size());
    nn::causal_attention_backward(datt.data(), a.att, dqkv.data());
    dense_backward(blk.c_attn, dqkv.data(), a.ln1.data(), dln.data(), M, ready);
    norm_backward(blk.ln_1, dln.data(), a.x.data(), a.ln1_mean.data(), a.ln1_rstd.data(), dfrom.data(), M, ready);
    for (size_t i = 0; i < MC; ++i) dx[i] = dx[i] + dfrom[i];  // d x
  }
  dropout_grad_inplace(dx.data(), M * C, drop_mask_);
  // tok_emb + pos_emb: pos_emb's grad is the sum over the batch (sum_to_size); wpe's lookup came later in
  // the forward, so its grad is ready first; then wte's: the lm_head's grad plus the embedding's.
  std::vector<float> dpos(static_cast<size_t>(T * C));
  torch_sum_dim0(dx.data(), dpos.data(), B, T * C);
  std::vector<int64_t> arange(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) arange[static_cast<size_t>(t)] = t;
  std::vector<float> gw(static_cast<size_t>(cfg_.block_size * C));
  nn::embedding_backward(dpos.data(), arange.data(), T, cfg_.block_size, C, gw.data());
  accumulate(wpe_, gw.data());
  ready.push_back(&wpe_);
  std::vector<float> gt(static_cast<size_t>(V * C));
  nn::embedding_backward(dx.data(), idx_.data(), M, V, C, gt.data());
  for (size_t i = 0; i < tied.size(); ++i) tied[i] = tied[i] + gt[i];
  accumulate(wte_, tied.data());
  ready.push_back(&wte_);
}

}  // namespace ddplab::gpt
