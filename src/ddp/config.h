// One DDP experiment, as flags: the simulator, the verifier and the notebook labs all read the same ones.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/collective/allreduce.h"
#include "src/ddp/comm_hook.h"
#include "src/ddp/reducer.h"
#include "src/flags.h"
#include "src/kernels.h"
#include "src/limits.h"

namespace ddplab::ddp {

// The choice flags, in the order of their names (loss_name() etc.): the value is the name's index.
enum class LossKind { mse, ce, ce_probs };             // mse | ce | ce-probs
enum class OptimizerKind { sgd, adam };                // sgd | adam
enum class DatasetKind { random, toy, rand, digits };  // random | toy | rand | digits
enum class InitKind { same, per_rank, continue_ };     // same | per-rank | continue

const std::string& loss_name(LossKind k);
const std::string& dataset_name(DatasetKind k);
const std::string& init_name(InitKind k);
// Each throws std::invalid_argument on a name not in its list.
LossKind parse_loss(const std::string& s);
OptimizerKind parse_optimizer(const std::string& s);
InitKind parse_init(const std::string& s);

struct Config {
  int64_t world_size = 2;
  // model: "mlp" is an MLP layers[0] -> ... -> layers.back() (state_dict names layers.N), optional ReLU
  // between layers; "cnn" or a spec (src/model/spec.h) is an nn.Sequential (names 0.weight, ...).
  std::string model = "mlp";
  std::vector<int64_t> layers = {6, 4, 2};
  bool relu = false;
  LossKind loss = LossKind::mse;
  OptimizerKind optimizer = OptimizerKind::sgd;
  double lr = 0.01;
  double momentum = 0.0;
  // data
  DatasetKind dataset = DatasetKind::random;  // random (notebook 000) | toy (notebook 001) | rand (003) | digits
  std::string data;                           // --data: the digits file (default: scikit-learn's copy)
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
  InitKind init = InitKind::same;  // same: every rank seeds `seed`; per-rank: rank r seeds seed + r
  bool broadcast = true;           // DDP's broadcast of rank 0's parameters at construction
  bool broadcast_buffers = true;   // DDP's broadcast of rank 0's buffers before every training forward
  bool seed_per_rank = false;      // after DDP(model), manual_seed(seed + rank): Dropout masks differ per rank
  Average average = Average::predivide;
  double bucket_cap_mb = 25.0;
  int64_t no_sync = 1;  // all-reduce every K micro-batches
  collective::Algorithm allreduce = collective::Algorithm::ring;
  CommHookOptions comm_hook;  // --comm-hook and --powersgd-*: DDP.register_comm_hook
  // Uneven inputs (src/ddp/join.h): rank r trains on the first B - uneven*r of its B batches per epoch; with
  // `join`, inside torch.distributed.algorithms.Join([ddp]) (one per epoch), the divisor the world size
  // (divide_by_initial_world_size=True) or, with join_divide_active, the ranks not yet joined.
  int64_t uneven = 0;
  bool join = false;
  bool join_divide_active = false;
  Kernels kernels = Kernels::fast;  // Linear's products: OpenBLAS (PyTorch's calls) or fixed-order loops
  bool zero = false;  // the optimizer as torch's ZeroRedundancyOptimizer (src/ddp/zero.h): state sharded by rank
  // Not a DDP flag (not in the flag table, to_args or the ranks' agreement): the simulator's threads,
  // --threads (threads_from_flags in src/parallel.h). No result depends on it. 0: every available core.
  int threads = 0;
  // Not a flag either: with a comm hook, also run the built-in averaging on the same gradients and report
  // how each bucket's result differs (--explain, --report: one extra all-reduce per bucket).
  bool compare_hook = false;

  int64_t dataset_size() const;  // the training set's: toy 5, digits 1500, else --samples
  bool is_mlp() const { return model == "mlp"; }
  std::string model_spec() const;             // the layers, as a spec (the presets expanded)
  std::vector<int64_t> sample_shape() const;  // one input sample's shape: {in}, or {1, 8, 8} for images
  int64_t num_classes() const;                // width of y / number of labels
  int64_t num_samples_per_rank() const;       // DistributedSampler's num_samples
  int64_t batches_per_epoch() const;          // the DataLoader's batches per rank and epoch (before --uneven)
};

constexpr int64_t kMaxWorldSize = 64;

// Every flag below comes from one table in config.cc (name, usage line, Config member, limits or choices;
// the default is Config's): the names, the usage text, the parsing, to_args and the ranks' agreement.
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
// The model's last parameter (state_dict name, numel): the end of iteration 0's single bucket, which
// --explain and the report's ring section show.
std::pair<std::string, int64_t> last_parameter(const Config& cfg);
// One line for a learner: "world_size=2 | MLP 6-4-2 | mse | sgd lr=0.01 | ...".
std::string describe(const Config& cfg);
// The usage text of the shared flags.
const char* config_usage();

}  // namespace ddplab::ddp
