#include "src/ddp/replica.h"

#include <limits>

#include <fmt/format.h>

#include "src/ddp/zero.h"
#include "src/base/errors.h"
#include "src/model/norm.h"
#include "src/model/spec.h"

namespace ddplab::ddp {

Dataset make_dataset(const Config& cfg, Generator& gen, Dataset* test) {
  const int64_t in = cfg.layers.front(), out = cfg.layers.back();
  Dataset d;
  if (cfg.dataset == DatasetKind::digits) {
    const Dataset all = load_digits(cfg.data.empty() ? digits_default_path() : cfg.data);
    gen.manual_seed(cfg.seed);
    const std::vector<int64_t> perm = gen.randperm(kDigitsTotal);
    if (test) *test = subset(all, {perm.begin() + kDigitsTrain, perm.end()});
    return subset(all, {perm.begin(), perm.begin() + kDigitsTrain});
  }
  if (cfg.dataset == DatasetKind::toy) {
    d.x.resize(5, 2);
    d.x << -1.2f, 3.1f, -0.9f, 2.9f, -0.5f, 2.6f, 2.3f, -1.1f, 2.7f, -1.5f;
    d.labels = {0, 0, 0, 1, 1};
    d.y = Matrix::Zero(5, out);
    for (int64_t i = 0; i < 5; ++i) d.y(i, d.labels[static_cast<size_t>(i)]) = 1.0f;
    return d;
  }
  if (cfg.dataset == DatasetKind::rand) {  // MyTrainDataset: manual_seed, then rand(in), rand(out) per sample
    gen.manual_seed(cfg.seed);
    d.x.resize(cfg.samples, in);
    d.y.resize(cfg.samples, out);
    for (int64_t i = 0; i < cfg.samples; ++i) {
      gen.uniform_(d.x.row(i).data(), in);
      gen.uniform_(d.y.row(i).data(), out);
    }
  } else {
    d = random_tensor_dataset(cfg.samples, in, out, cfg.seed, gen);
  }
  for (int64_t i = 0; i < d.size(); ++i) {  // torch.argmax: the first index of the maximum
    Eigen::Index arg;
    d.y.row(i).maxCoeff(&arg);
    d.labels.push_back(arg);
  }
  return d;
}

Sequential make_model(const Config& cfg, int64_t rank, Generator& gen) {
  if (cfg.init == InitKind::continue_) {
    make_dataset(cfg, gen);  // the model's draws follow the dataset's, from the same generator
  } else {
    gen.manual_seed(cfg.init == InitKind::per_rank ? cfg.seed + static_cast<uint64_t>(rank) : cfg.seed);
  }
  // The MLP is nn.Sequential held as `self.layers` (names layers.0.weight, ...); a spec is the model itself.
  Sequential m = build_model(plan_model(cfg.model_spec(), cfg.sample_shape()), cfg.is_mlp() ? "layers" : "", gen);
  m.set_kernels(cpu_kernels(cfg.kernels));
  if (cfg.sync_batchnorm) convert_sync_batchnorm(m);
  return m;
}

namespace {

std::unique_ptr<Optimizer> optimizer_over(const Config& cfg, std::vector<Parameter*> params) {
  if (cfg.optimizer == OptimizerKind::adam) {
    AdamOptions o;
    o.lr = cfg.lr;
    return std::make_unique<Adam>(std::move(params), o);
  }
  SGDOptions o;
  o.lr = cfg.lr;
  o.momentum = cfg.momentum;
  return std::make_unique<SGD>(std::move(params), o);
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const Config& cfg, Module& model, int64_t rank) {
  if (!cfg.zero || rank < 0) return optimizer_over(cfg, model.parameters());
  return std::make_unique<ZeroRedundancyOptimizer>(
      model.parameters(), cfg.world_size, rank,
      [&cfg](std::vector<Parameter*> shard) { return optimizer_over(cfg, std::move(shard)); });
}

LossResult compute_loss(const Config& cfg, const Matrix& out, const Dataset& data, const std::vector<int64_t>& idx) {
  const float g = cfg.micro_batch_grad();  // --no-sync-loss divide: (loss / K).backward()
  if (cfg.loss == LossKind::ce) return cross_entropy(out, data.gather_labels(idx), g);
  if (cfg.loss == LossKind::ce_probs) return cross_entropy_probs(out, data.gather_y(idx), g);
  return mse_loss(out, data.gather_y(idx), g);
}

Replica::Replica(const Config& c, int64_t r)
    : TrainingRank(r),
      model(make_model(c, r, gen)),
      sampler(c.dataset_size(), c.world_size, r, c.shuffle, c.sampler_seed, c.drop_last),
      loader(sampler, c.batch_size, c.loader_drop_last, gen),
      cfg(c) {
  optimizer = make_optimizer(c, model, r);
}

namespace {

// The model's layers with nothing drawn (zero parameters), on `gen` (Dropout's masks) and cfg's kernels.
Sequential undrawn_model(const Config& cfg, Generator& gen) {
  Sequential m = build_model(plan_model(cfg.model_spec(), cfg.sample_shape()), cfg.is_mlp() ? "layers" : "", gen,
                             /*draw=*/false);
  m.set_kernels(cpu_kernels(cfg.kernels));
  if (cfg.sync_batchnorm) convert_sync_batchnorm(m);
  return m;
}

}  // namespace

Replica::Replica(const Config& c, int64_t r, const Replica& like)
    : TrainingRank(r, like.gen),
      model(undrawn_model(c, gen)),
      sampler(c.dataset_size(), c.world_size, r, c.shuffle, c.sampler_seed, c.drop_last),
      loader(sampler, c.batch_size, c.loader_drop_last, gen),
      cfg(c) {
  optimizer = make_optimizer(c, model, r);
  copy_parameters(like.model, model);
  copy_buffers(like.model, model);
}

Tensor input_batch(const Config& cfg, const Dataset& data, const std::vector<int64_t>& idx) {
  std::vector<int64_t> shape = {static_cast<int64_t>(idx.size())};
  for (int64_t d : cfg.sample_shape()) shape.push_back(d);
  return Tensor(shape, data.gather_x(idx));
}

void copy_parameters(const Module& from, Module& to) {
  const auto src = from.parameters();
  const auto dst = to.parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i]->value = src[i]->value;
}

int64_t Replica::begin_epoch(int64_t epoch) {
  if (cfg.set_epoch) sampler.set_epoch(epoch);
  epoch_indices = sampler.indices();
  batches = loader.iter();
  return static_cast<int64_t>(batches.size());
}

float Replica::forward_backward(int64_t b, int64_t step) {
  // --inject-nan: a NaN in this rank's first micro-batch of that step, in its first input value
  const bool nan = cfg.inject_nan_rank == rank && cfg.inject_nan_step == step && b % cfg.no_sync == 0;
  return forward_backward(*data, batches[static_cast<size_t>(b)], nan);
}

float Replica::forward_backward(const Dataset& data, const std::vector<int64_t>& idx, bool nan_input) {
  Tensor input = input_batch(cfg, data, idx);
  if (nan_input) input.value(0, 0) = std::numeric_limits<float>::quiet_NaN();
  const Tensor out = model.forward(input);
  LossResult l = compute_loss(cfg, out.value, data, idx);
  ready.clear();
  model.backward(Tensor(out.shape, std::move(l.grad)), ready);
  return l.loss;
}

void copy_buffers(const Module& from, Module& to) {
  const auto src = from.buffers();
  const auto dst = to.buffers();
  for (size_t i = 0; i < src.size(); ++i) {
    dst[i]->value = src[i]->value;
    dst[i]->count = src[i]->count;
  }
}

int64_t test_correct(const Config& cfg, Module& model, const Dataset& test) {
  std::vector<int64_t> all(static_cast<size_t>(test.size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  model.eval();
  const Tensor out = model.forward(input_batch(cfg, test, all));
  model.train();
  int64_t correct = 0;
  for (int64_t i = 0; i < out.value.rows(); ++i) {  // torch.argmax: the first index of the maximum
    Eigen::Index arg;
    out.value.row(i).maxCoeff(&arg);
    correct += arg == test.labels[static_cast<size_t>(i)];
  }
  return correct;
}

}  // namespace ddplab::ddp
