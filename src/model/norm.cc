#include "src/model/norm.h"

#include <stdexcept>

#include <fmt/format.h>

#include "src/nn/activations.h"
#include "src/nn/batchnorm.h"
#include "src/nn/dropout.h"
#include "src/nn/layernorm.h"
#include "src/nn/sync_batchnorm.h"

namespace ddplab {

BatchNorm::BatchNorm(int64_t c, double eps, double momentum, int dims, const std::string& prefix)
    : C_(c), eps_(eps), momentum_(momentum), dims_(dims) {
  weight = Parameter::named(prefix + ".weight", {c}, Matrix::Ones(c, 1));
  bias = Parameter::named(prefix + ".bias", {c}, Matrix::Zero(c, 1));
  running_mean = {prefix + ".running_mean", {c}, Matrix::Zero(c, 1)};
  running_var = {prefix + ".running_var", {c}, Matrix::Ones(c, 1)};
  num_batches_tracked = {prefix + ".num_batches_tracked", {}, Matrix(), true, 0};
}

Tensor BatchNorm::forward(const Tensor& x) {
  const size_t rank = x.shape.size();
  const bool ok = dims_ == 2 ? rank == 4 : (rank == 2 || rank == 3);
  if (!ok || x.shape[1] != C_)
    throw std::invalid_argument(fmt::format("{} got input [{}]", repr(), fmt::join(x.shape, ", ")));
  const int64_t N = x.shape[0], L = x.numel() / (N * C_);
  Tensor y = Tensor::empty(x.shape);
  if (!training_) {
    nn::batchnorm_forward_eval(x.data(), weight.data(), bias.data(), running_mean.value.data(),
                               running_var.value.data(), y.data(), N, C_, L, eps_);
    return y;
  }
  if (N * L < 2 && !syncs()) {  // SyncBatchNorm across ranks needs more than 1 value in all
    throw std::invalid_argument(fmt::format("{}: expected more than 1 value per channel when training, got input [{}]",
                                            repr(), fmt::join(x.shape, ", ")));
  }
  synced_ = syncs();
  if (synced_) return forward_sync(x, N, L);
  input_ = x;
  save_mean_.resize(static_cast<size_t>(C_));
  save_invstd_.resize(static_cast<size_t>(C_));
  nn::batchnorm_forward_train(x.data(), weight.data(), bias.data(), running_mean.value.data(), running_var.value.data(),
                              y.data(), save_mean_.data(), save_invstd_.data(), N, C_, L, momentum_, eps_);
  ++num_batches_tracked.count;
  count_use(weight, *this);
  count_use(bias, *this);
  return y;
}

Tensor BatchNorm::backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) {
  if (synced_) return backward_sync(grad_out, need_grad_input, ready);
  const int64_t N = input_.shape[0], L = input_.numel() / (N * C_);
  Tensor gx = Tensor::empty(input_.shape);  // the kernel writes it either way
  Matrix gw(C_, 1), gb(C_, 1);
  nn::batchnorm_backward_train(grad_out.data(), input_.data(), weight.data(), save_mean_.data(), save_invstd_.data(),
                               gx.data(), gw.data(), gb.data(), N, C_, L);
  add_grad(weight, *this, gw, ready);
  add_grad(bias, *this, gb, ready);
  if (!need_grad_input) return Tensor();
  return gx;
}

LayerNorm::LayerNorm(int64_t n, double eps, const std::string& prefix, bool with_bias)
    : n_(n), eps_(eps), has_bias_(with_bias) {
  weight = Parameter::named(prefix + ".weight", {n}, Matrix::Ones(n, 1));
  bias = Parameter::named(prefix + ".bias", {n}, Matrix::Zero(n, 1));
}

Tensor LayerNorm::forward(const Tensor& x) {
  if (x.shape.empty() || x.shape.back() != n_) {
    throw std::invalid_argument(fmt::format("{} got input [{}]", repr(), fmt::join(x.shape, ", ")));
  }
  const int64_t M = x.numel() / n_;
  Tensor y = Tensor::empty(x.shape);
  input_ = x;
  mean_.resize(static_cast<size_t>(M));
  rstd_.resize(static_cast<size_t>(M));
  nn::layer_norm_forward(x.data(), weight.data(), has_bias_ ? bias.data() : nullptr, y.data(), mean_.data(),
                         rstd_.data(), M, n_, static_cast<float>(eps_));
  count_use(weight, *this);
  if (has_bias_) count_use(bias, *this);
  return y;
}

Tensor LayerNorm::backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) {
  const int64_t M = input_.numel() / n_;
  Tensor gx = need_grad_input ? Tensor::empty(input_.shape) : Tensor();
  Matrix gw(n_, 1), gb(n_, 1);
  nn::layer_norm_backward(grad_out.data(), input_.data(), mean_.data(), rstd_.data(), weight.data(),
                          need_grad_input ? gx.data() : nullptr, gw.data(), has_bias_ ? gb.data() : nullptr, M, n_);
  add_grad(weight, *this, gw, ready);
  if (has_bias_) add_grad(bias, *this, gb, ready);
  return gx;
}

std::vector<Parameter*> LayerNorm::parameters() {
  if (!has_bias_) return {&weight};
  return {&weight, &bias};
}

std::string LayerNorm::repr() const {
  return fmt::format("LayerNorm(({},), eps={}, elementwise_affine=True)", n_, eps_);
}

std::string BatchNorm::repr() const {
  return fmt::format("{}({}, eps={}, momentum={}, affine=True, track_running_stats=True)",
                     sync ? "SyncBatchNorm" : fmt::format("BatchNorm{}d", dims_), C_, eps_, momentum_);
}

// SyncBatchNorm.forward: num_batches_tracked += 1, then sync_batch_norm.apply: this rank's mean and invstd
// with its count, all_gather, the union's statistics (and the running ones' update), the normalisation.
Tensor BatchNorm::forward_sync(const Tensor& x, int64_t N, int64_t L) {
  const size_t C = static_cast<size_t>(C_), W = static_cast<size_t>(process_group->world_size());
  std::vector<float> mine(2 * C + 1), gathered(W * (2 * C + 1));
  nn::batchnorm_stats(x.data(), mine.data(), mine.data() + C, N, C_, L, eps_);
  mine[2 * C] = static_cast<float>(N * L);
  process_group->all_gather(mine.data(), mine.size(), gathered.data());
  save_mean_.resize(C);
  save_invstd_.resize(C);
  total_ = nn::sync_batchnorm_gather_stats(gathered.data(), static_cast<int>(W), C_, running_mean.value.data(),
                                           running_var.value.data(), momentum_, eps_, save_mean_.data(),
                                           save_invstd_.data());
  ++num_batches_tracked.count;
  input_ = x;
  Tensor y = Tensor::empty(x.shape);
  nn::sync_batchnorm_elemt(x.data(), weight.data(), bias.data(), save_mean_.data(), save_invstd_.data(), y.data(), N,
                           C_, L);
  count_use(weight, *this);
  count_use(bias, *this);
  return y;
}

// SyncBatchNorm's backward: local sums and the parameters' gradients; the all_reduce of [sum_dy, sum_dy_xmu]
// only when the input needs a gradient (torch skips it otherwise).
Tensor BatchNorm::backward_sync(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) {
  const int64_t N = input_.shape[0], L = input_.numel() / (N * C_);
  const size_t C = static_cast<size_t>(C_);
  std::vector<float> sums(2 * C);
  Matrix gw(C_, 1), gb(C_, 1);
  nn::sync_batchnorm_backward_reduce(grad_out.data(), input_.data(), save_mean_.data(), save_invstd_.data(),
                                     sums.data(), sums.data() + C, gw.data(), gb.data(), N, C_, L);
  Tensor gx;
  if (need_grad_input) {
    process_group->all_reduce_sum(sums.data(), sums.size());
    gx = Tensor::empty(input_.shape);
    nn::sync_batchnorm_backward_elemt(grad_out.data(), input_.data(), save_mean_.data(), save_invstd_.data(),
                                      weight.data(), sums.data(), sums.data() + C, total_, gx.data(), N, C_, L);
  }
  add_grad(weight, *this, gw, ready);
  add_grad(bias, *this, gb, ready);
  return gx;
}

int convert_sync_batchnorm(Module& model) {
  int n = 0;
  apply(model, [&](Module& m) {
    if (auto* bn = dynamic_cast<BatchNorm*>(&m)) {
      bn->sync = true;
      ++n;
    }
  });
  return n;
}

void set_process_group(Module& model, ProcessGroup* group) {
  apply(model, [&](Module& m) {
    if (auto* bn = dynamic_cast<BatchNorm*>(&m); bn && bn->sync) bn->process_group = group;
  });
}

Tensor Dropout::forward(const Tensor& x) {
  if (!training_) return x;  // eval draws nothing (and keeps the last training mask for last_mask())
  if (p_ == 0.0) {           // the identity, drawing nothing (dropout_mask's answer, without the mask's memory)
    noise_.clear();
    return x;
  }
  noise_.resize(static_cast<size_t>(x.numel()));
  if (!nn::dropout_mask(noise_.data(), x.numel(), p_, training_, *gen_)) {
    noise_.clear();
    return x;
  }
  Tensor y = Tensor::empty(x.shape);
  nn::dropout_forward(x.data(), noise_.data(), y.data(), x.numel());
  return y;
}

Tensor Dropout::backward(const Tensor& g, bool need_grad_input, std::vector<Parameter*>&) {
  if (!need_grad_input) return Tensor();
  if (noise_.empty()) return g;
  Tensor gx = Tensor::empty(g.shape);
  nn::dropout_backward(g.data(), noise_.data(), gx.data(), g.numel());
  return gx;
}

std::string Dropout::repr() const { return fmt::format("Dropout(p={}, inplace=False)", p_); }

Tensor Activation::forward(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape);
  const int64_t n = x.numel();
  switch (kind_) {
    case Kind::tanh:
      nn::tanh_forward(x.data(), y.data(), n);
      break;
    case Kind::sigmoid:
      nn::sigmoid_forward(x.data(), y.data(), n);
      break;
    case Kind::gelu:
      nn::gelu_forward(x.data(), y.data(), n, nn::GeluApproximate::kNone);
      break;
    case Kind::gelu_tanh:
      nn::gelu_forward(x.data(), y.data(), n, nn::GeluApproximate::kTanh);
      break;
  }
  saved_ = (kind_ == Kind::tanh || kind_ == Kind::sigmoid) ? y : x;
  return y;
}

Tensor Activation::backward(const Tensor& g, bool need_grad_input, std::vector<Parameter*>&) {
  if (!need_grad_input) return Tensor();
  Tensor gx = Tensor::empty(g.shape);
  const int64_t n = g.numel();
  switch (kind_) {
    case Kind::tanh:
      nn::tanh_backward(g.data(), saved_.data(), gx.data(), n);
      break;
    case Kind::sigmoid:
      nn::sigmoid_backward(g.data(), saved_.data(), gx.data(), n);
      break;
    case Kind::gelu:
      nn::gelu_backward(g.data(), saved_.data(), gx.data(), n, nn::GeluApproximate::kNone);
      break;
    case Kind::gelu_tanh:
      nn::gelu_backward(g.data(), saved_.data(), gx.data(), n, nn::GeluApproximate::kTanh);
      break;
  }
  return gx;
}

std::string Activation::repr() const {
  switch (kind_) {
    case Kind::tanh:
      return "Tanh()";
    case Kind::sigmoid:
      return "Sigmoid()";
    case Kind::gelu:
      return "GELU(approximate='none')";
    case Kind::gelu_tanh:
      return "GELU(approximate='tanh')";
  }
  return "";
}

}  // namespace ddplab
