// One rank of the nn.Sequential models (the MLP, the CNN, a spec): dataset, model, optimizer, and the data
// seam of the training loop (loop.h): DistributedSampler epochs through a DataLoader.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "src/data/data.h"
#include "src/ddp/config.h"
#include "src/ddp/rank.h"
#include "src/train/loss.h"
#include "src/model/linear.h"
#include "src/train/optim.h"

namespace ddplab::ddp {

// random: manual_seed(seed), then per sample randn(in), randn(out) (notebook 000); labels = argmax(y).
// rand: manual_seed(seed), then per sample rand(in), rand(out) (notebook 003's MyTrainDataset).
// toy: notebook 001's five 2-d points with labels 0,0,0,1,1 (y = one-hot labels).
// digits: load_digits, then manual_seed(seed); perm = randperm(1797); train = perm[:1500], and `test`
// (when given) gets perm[1500:].
// `gen` plays the process's global generator (each real rank has its own; so does each simulated one).
Dataset make_dataset(const Config& cfg, Generator& gen, Dataset* test = nullptr);

// manual_seed(seed) (or seed + rank with --init per-rank; or, with --init continue, the draws right after
// the dataset's), then the model: the MLP with state_dict names layers.N, or the --model spec's layers.
Sequential make_model(const Config& cfg, int64_t rank, Generator& gen);
// SGD or Adam over the model's parameters; with cfg.zero and a rank (>= 0), that rank's
// ZeroRedundancyOptimizer (src/ddp/zero.h) over the same parameters, the same optimizer on its shard.
std::unique_ptr<Optimizer> make_optimizer(const Config& cfg, Module& model, int64_t rank = -1);
LossResult compute_loss(const Config& cfg, const Matrix& out, const Dataset& data, const std::vector<int64_t>& idx);
// The rows `idx` of data.x as one input batch of cfg's sample shape, as default_collate stacks them.
Tensor input_batch(const Config& cfg, const Dataset& data, const std::vector<int64_t>& idx);

// Whether every rank's model initialisation draws the same values (--init same or continue: every rank
// seeds alike), so that the simulator draws it once and copies it.
inline bool draws_alike(const Config& cfg) { return cfg.init != InitKind::per_rank; }

// One rank: its model replica, optimizer, sampler and reducer. Not movable: they point into each other.
struct Replica : TrainingRank {
  Replica(const Config& cfg, int64_t rank);
  // What Replica(cfg, rank) builds when rank seeds as like.rank did (draws_alike): like's parameters,
  // buffers and generator state as like's construction left them, copied instead of drawn again.
  Replica(const Config& cfg, int64_t rank, const Replica& like);

  std::vector<Parameter*> parameters() override { return model.parameters(); }
  std::vector<Buffer*> buffers() override { return model.buffers(); }
  int64_t begin_epoch(int64_t epoch) override;
  float forward_backward(int64_t b, int64_t step) override;
  // Forward, loss and backward on the samples `idx` (grads accumulate, as under no_sync). Returns the loss.
  float forward_backward(const Dataset& data, const std::vector<int64_t>& idx, bool nan_input = false);

  Sequential model;
  DistributedSampler sampler;
  DataLoader loader;
  const Config& cfg;
  const Dataset* data = nullptr;               // the training set (the caller's)
  std::vector<int64_t> epoch_indices;          // what the sampler handed this rank this epoch
  std::vector<std::vector<int64_t>> batches;   // the DataLoader's batches of this epoch
};

// Copies every parameter / buffer of `from` into `to` (the simulator's broadcasts).
void copy_parameters(const Module& from, Module& to);
void copy_buffers(const Module& from, Module& to);

// model.eval() and how many of `test` the output's argmax gets right (the whole set in one forward, as
// `(model(x_test).argmax(1) == y_test).sum()` does), then model.train() again.
int64_t test_correct(const Config& cfg, Module& model, const Dataset& test);

}  // namespace ddplab::ddp
