// nn.BatchNorm1d / nn.BatchNorm2d and nn.Dropout as Modules over the kernels of src/nn.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "src/model/module.h"
#include "src/data/torch_rng.h"

namespace ddplab {

// The process group a SyncBatchNorm talks to (torch's process_group, the world): ddp/ adapts a
// comm::Communicator to it, so that the model layer needs nothing from comm/.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int world_size() const = 0;
  // Every rank gives n floats; out receives world_size * n, in rank order.
  virtual void all_gather(const float* in, size_t n, float* out) = 0;
  virtual void all_reduce_sum(float* data, size_t n) = 0;
};

// nn.BatchNorm1d(num_features) on [N, C] or [N, C, L]; nn.BatchNorm2d on [N, C, H, W]. eps 1e-5, momentum
// 0.1, affine, track_running_stats. Training normalises with the batch's statistics and updates the
// running ones (and num_batches_tracked); eval uses the running ones.
//
// After convert_sync_batchnorm it is nn.SyncBatchNorm (same state_dict): a training forward with a process
// group of two or more ranks all_gathers every rank's mean, invstd and count and normalises with the union
// batch's statistics (src/nn/sync_batchnorm.h), and its backward all_reduces the two sums the input's
// gradient needs. Without a group (one device), or in eval, it computes as BatchNorm, as torch falls back.
class BatchNorm : public Module {
 public:
  BatchNorm(int64_t num_features, double eps, double momentum, int dims, const std::string& prefix);

  Tensor forward(const Tensor& x) override;
  // NativeBatchNormBackward hands autograd the weight's gradient before the bias's (measured with hooks).
  Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) override;
  std::vector<Parameter*> parameters() override { return {&weight, &bias}; }
  std::vector<Buffer*> buffers() override { return {&running_mean, &running_var, &num_batches_tracked}; }
  using Module::buffers;
  using Module::parameters;
  std::string repr() const override;

  Parameter weight, bias;
  Buffer running_mean, running_var, num_batches_tracked;
  bool sync = false;                      // nn.SyncBatchNorm (convert_sync_batchnorm)
  ProcessGroup* process_group = nullptr;  // SyncBatchNorm's; null: no other rank

 private:
  bool syncs() const { return sync && training_ && process_group && process_group->world_size() > 1; }
  Tensor forward_sync(const Tensor& x, int64_t N, int64_t L);
  Tensor backward_sync(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready);

  int64_t C_;
  double eps_, momentum_;
  int dims_;
  Tensor input_;
  std::vector<float> save_mean_, save_invstd_;
  int64_t total_ = 0;  // SyncBatchNorm: every rank's count together
  bool synced_ = false;  // the last training forward was SyncBatchNorm's
};

// nn.SyncBatchNorm.convert_sync_batchnorm(model): every BatchNorm in the tree becomes SyncBatchNorm, with
// its parameters and buffers. Returns how many.
int convert_sync_batchnorm(Module& model);
// The process group of every SyncBatchNorm in the tree (null: none).
void set_process_group(Module& model, ProcessGroup* group);

// nn.LayerNorm(normalized_shape, eps=1e-5) over the last dimension (elementwise_affine: weight ones, bias
// zeros; reset_parameters draws nothing). Training and eval compute alike. With bias false it is nanoGPT's
// LayerNorm(ndim, bias=False): F.layer_norm(x, shape, weight, None, 1e-5), no bias parameter (`bias` stays
// zero and out of parameters()).
class LayerNorm : public Module {
 public:
  LayerNorm(int64_t normalized_shape, double eps, const std::string& prefix, bool bias = true);
  Tensor forward(const Tensor& x) override;
  // NativeLayerNormBackward's weight gradient reaches autograd before the bias's (the tiny GPT's buckets).
  Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) override;
  std::vector<Parameter*> parameters() override;
  using Module::parameters;
  std::string repr() const override;

  Parameter weight, bias;

 private:
  int64_t n_;
  double eps_;
  bool has_bias_;
  Tensor input_;
  std::vector<float> mean_, rstd_;
};

// nn.Dropout(p): in training each element is kept when a double uniform from the rank's global generator
// is below 1 - p, and scaled by 1/(1 - p); in eval the identity.
class Dropout : public Module {
 public:
  Dropout(double p, Generator& gen) : p_(p), gen_(&gen) {}
  Tensor forward(const Tensor& x) override;
  void set_generator(Generator& gen) override { gen_ = &gen; }
  Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) override;
  std::string repr() const override;
  // The last training forward's mask values (0 or 1/(1-p)); empty when it drew nothing.
  const std::vector<float>& last_mask() const { return noise_; }

 private:
  double p_;
  Generator* gen_;
  std::vector<float> noise_;
};

// nn.Tanh, nn.Sigmoid, nn.GELU(approximate='none' | 'tanh').
class Activation : public Module {
 public:
  enum class Kind { tanh, sigmoid, gelu, gelu_tanh };
  explicit Activation(Kind k) : kind_(k) {}
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) override;
  std::string repr() const override;

 private:
  Kind kind_;
  Tensor saved_;  // tanh and sigmoid's backward read their output, GELU's its input
};

}  // namespace ddplab
