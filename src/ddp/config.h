// One DDP experiment, as flags: the simulator, the verifier and the notebook labs all read the same ones.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "src/collective/allreduce.h"
#include "src/ddp/reducer.h"
#include "src/flags.h"
#include "src/kernels.h"
#include "src/limits.h"

namespace ddplab::ddp {

struct Config {
  int64_t world_size = 2;
  // model: MLP layers[0] -> ... -> layers.back(), optional ReLU between layers
  std::vector<int64_t> layers = {6, 4, 2};
  bool relu = false;
  std::string loss = "mse";       // mse | ce
  std::string optimizer = "sgd";  // sgd | adam
  double lr = 0.01;
  double momentum = 0.0;
  // data
  std::string dataset = "random";  // random (notebook 000) | toy (notebook 001)
  int64_t samples = 64;
  uint64_t seed = 12345;
  bool shuffle = true;
  uint64_t sampler_seed = 0;
  bool drop_last = false;         // DistributedSampler's
  bool loader_drop_last = false;  // DataLoader's
  bool set_epoch = true;
  int64_t batch_size = 8;  // per rank
  int64_t epochs = 1;
  // DDP
  std::string init = "same";  // same: every rank seeds `seed`; per-rank: rank r seeds seed + r
  bool broadcast = true;      // DDP's broadcast of rank 0's parameters at construction
  Average average = Average::predivide;
  double bucket_cap_mb = 25.0;
  int64_t no_sync = 1;  // all-reduce every K micro-batches
  collective::Algorithm allreduce = collective::Algorithm::ring;
  Kernels kernels = Kernels::fast;  // Linear's products: OpenBLAS (PyTorch's calls) or fixed-order loops

  int64_t dataset_size() const { return dataset == "toy" ? 5 : samples; }
  int64_t num_samples_per_rank() const;  // DistributedSampler's num_samples
};

constexpr int64_t kMaxWorldSize = 64;

// The flags Config reads, for Flags' list of known names.
std::set<std::string> config_flag_names();
// Reads and validates every flag; throws UsageError naming the flag and its limit.
Config config_from_flags(const Flags& flags);
// Cross-field checks (also run by config_from_flags), and the size limits of src/limits.h.
void validate(const Config& cfg);
// What a simulation of `cfg` allocates, for the limits.
Footprint footprint(const Config& cfg);
// The config as the flags that reproduce it, in a fixed order (hashing, goldens, printing).
std::vector<std::string> to_args(const Config& cfg);
// One line for a learner: "world_size=2 | MLP 6-4-2 | mse | sgd lr=0.01 | ...".
std::string describe(const Config& cfg);
// The usage text of the shared flags.
const char* config_usage();

}  // namespace ddplab::ddp
