// Dataset, DataLoader and DistributedSampler with PyTorch's exact index lists and generator draws.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/tensor/tensor.h"
#include "src/data/torch_rng.h"

namespace ddplab {

// A map-style dataset of (x, y) pairs held as two matrices, one sample per row. Classification data
// also carries integer labels (y then holds them as floats too, for printing).
struct Dataset {
  Matrix x, y;
  std::vector<int64_t> labels;

  int64_t size() const { return x.rows(); }
  // The rows `indices` of x, y (and labels), stacked as default_collate stacks samples.
  Matrix gather_x(const std::vector<int64_t>& indices) const;
  Matrix gather_y(const std::vector<int64_t>& indices) const;
  std::vector<int64_t> gather_labels(const std::vector<int64_t>& indices) const;
};

// Notebook 000's RandomTensorDataset: manual_seed(seed), then per sample randn(in_shape), randn(out_shape).
// Draws from the global generator, as the notebook does (or from `gen`: a process's own global one).
Dataset random_tensor_dataset(int64_t num_samples, int64_t in_shape, int64_t out_shape, uint64_t seed = 12345,
                              Generator& gen = default_generator());

// scikit-learn's 8x8 handwritten digits (Debian's python3-sklearn ships them as digits.csv.gz: 1797 rows of
// 64 pixels 0..16 and the label). x is pixel / 16 (exact in float32), one image per row; labels 0..9;
// y the one-hot labels. Throws UsageError naming the file and what is wrong with it.
constexpr int64_t kDigitsTotal = 1797, kDigitsTrain = 1500;
extern const char* const kDigitsDefaultPath;
// Where --dataset digits reads without --data: $DDPLAB_DIGITS when set (a machine whose sklearn lives
// elsewhere, the GPU bundle), else Debian's kDigitsDefaultPath.
std::string digits_default_path();
Dataset load_digits(const std::string& path);
// The rows `indices` of `d`, as d[indices] (x, y and labels).
Dataset subset(const Dataset& d, const std::vector<int64_t>& indices);

// torch.utils.data.DistributedSampler(dataset, num_replicas, rank, shuffle, seed, drop_last).
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_len, int64_t num_replicas, int64_t rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  // This rank's indices for the current epoch: randperm(N) from a Generator seeded seed + epoch (or
  // 0..N-1), padded by repeating from the start (or truncated with drop_last), then rank::num_replicas.
  std::vector<int64_t> indices() const;
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  int64_t dataset_len_, num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

// torch.utils.data.DataLoader(dataset, batch_size, shuffle | sampler, drop_last), num_workers = 0.
class DataLoader {
 public:
  // shuffle=False -> SequentialSampler; shuffle=True -> RandomSampler drawing its seed from `gen`.
  DataLoader(int64_t dataset_len, int64_t batch_size, bool shuffle = false, bool drop_last = false,
             Generator& gen = default_generator());
  // sampler=DistributedSampler (shuffle must then be False in PyTorch). The loader reads the sampler at
  // every iter(), so set_epoch on it takes effect; the sampler must outlive the loader.
  DataLoader(const DistributedSampler& sampler, int64_t batch_size, bool drop_last = false,
             Generator& gen = default_generator());

  // One epoch, as `for batch in loader` sees it. Like iter(loader) it first draws _base_seed (one int64
  // random_()) from `gen`, even with num_workers=0; a RandomSampler then draws its own seed.
  std::vector<std::vector<int64_t>> iter();
  int64_t len() const;  // number of batches

 private:
  std::function<std::vector<int64_t>()> sampler_;
  int64_t sampler_len_, batch_size_;
  bool drop_last_;
  Generator* gen_;
};

}  // namespace ddplab
