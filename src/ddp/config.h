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
#include "src/base/flags.h"
#include "src/gpt/config.h"
#include "src/tensor/kernels.h"
#include "src/base/limits.h"

namespace ddplab::ddp {

// The choice flags, in the order of their names (loss_name() etc.): the value is the name's index.
enum class LossKind { mse, ce, ce_probs };             // mse | ce | ce-probs
enum class OptimizerKind { sgd, adam, adamw };         // sgd | adam | adamw (--model gpt's)
enum class DatasetKind { random, toy, rand, digits, text };  // random | toy | rand | digits | text (gpt's)
enum class InitKind { same, per_rank, continue_ };     // same | per-rank | continue

const std::string& loss_name(LossKind k);
const std::string& dataset_name(DatasetKind k);
const std::string& init_name(InitKind k);
// Each throws std::invalid_argument on a name not in its list.
LossKind parse_loss(const std::string& s);
OptimizerKind parse_optimizer(const std::string& s);
InitKind parse_init(const std::string& s);

// One Join context per epoch (as ddplab's training loops have written it) or one around all epochs (as
// PyTorch's Join tutorial writes it: a rank out of batches goes on into the next epoch).
enum class JoinScope { epoch, run };  // epoch | run

// How the K micro-batch losses of --no-sync K reach .grad, the two ways scripts write it: sum: loss.backward()
// on each micro-batch mean (the gradients add up to K times one batch's); divide: (loss / K).backward()
// (nanoGPT's: the mean over the K micro-batches, one big batch's gradient).
enum class NoSyncLoss { sum, divide };  // sum | divide
// Which of a step's K micro-batches runs outside no_sync() (--sync-on): the last (correct), the first (the
// all-reduce averages only that micro-batch's .grad; the rest add each rank's own), or none (no all-reduce).
enum class SyncOn { last, first, never };
// --hand-sync: the gradients averaged by the training script itself instead of DDP's Reducer (the exercise every
// DDP course sets), in one of the layouts courses write: an all-reduce per parameter (PyTorch's tutorial), one flat
// buffer of every gradient in model order, or buckets of at most bucket_cap_mb in reverse model order, never
// rebuilt. The arithmetic is --average's. none: DDP's own.
enum class HandSync { none, per_parameter, flat, buckets };

struct Config {
  int64_t world_size = 2;
  // model: "mlp" is an MLP layers[0] -> ... -> layers.back() (state_dict names layers.N), optional ReLU
  // between layers; "cnn" or a spec (src/model/spec.h) is an nn.Sequential (names 0.weight, ...); "gpt" is
  // nanoGPT's model (src/gpt/), its shape in `gpt` and its data nanoGPT's get_batch steps.
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
  bool sync_batchnorm = false;     // nn.SyncBatchNorm.convert_sync_batchnorm(model) before DDP(model)
  Average average = Average::predivide;
  double bucket_cap_mb = 25.0;
  int64_t no_sync = 1;  // all-reduce every K micro-batches
  NoSyncLoss no_sync_loss = NoSyncLoss::sum;  // --model gpt: divide (nanoGPT's)
  SyncOn sync_on = SyncOn::last;
  HandSync hand_sync = HandSync::none;
  // --loss-divisor D: loss = loss_fn(out, y) / D before the backward (D = world_size: the common mistake of
  // dividing by the number of ranks when DDP already averages). 1: no division.
  int64_t loss_divisor = 1;
  // --inject-nan RANK:STEP: a NaN in that rank's first micro-batch of that optimizer step (its first input value),
  // to show how one rank's NaN reaches every rank (docs/questions.md). -1: none.
  int64_t inject_nan_rank = -1, inject_nan_step = -1;
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
  JoinScope join_scope = JoinScope::epoch;
  // DDP's constructor arguments and the training loop's steps, on every model.
  bool find_unused_parameters = false;
  bool static_graph = false;
  bool gradient_as_bucket_view = false;
  bool zero_grad_set_to_none = true;  // optimizer.zero_grad(set_to_none=...): torch 1.13's default is False
  double clip_grad_norm = 0.0;        // clip_grad_norm_(max_norm) after the all-reduce; 0: no clipping
  // --model gpt: nanoGPT's GPTConfig and train.py (data is then a text file, seed_per_rank its seed_offset:
  // rank r seeds seed + r before the model). vocab_size comes from the data.
  gpt::GptConfig gpt;
  int64_t steps = 4;  // optimizer steps, each of no_sync micro-batches
  int64_t eval_every = 0;
  int64_t eval_iters = 2;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95;
  // Not a DDP flag (not in the flag table, to_args or the ranks' agreement): the simulator's threads,
  // --threads (threads_from_flags in src/base/parallel.h). No result depends on it. 0: every available core.
  int threads = 0;
  // Not a flag either: with a comm hook, also run the built-in averaging on the same gradients and report
  // how each bucket's result differs (--explain, --report: one extra all-reduce per bucket).
  bool compare_hook = false;

  int64_t dataset_size() const;  // the training set's: toy 5, digits 1500, else --samples
  bool is_mlp() const { return model == "mlp"; }
  bool is_gpt() const { return model == "gpt"; }
  std::string model_spec() const;             // the layers, as a spec (the presets expanded)
  std::vector<int64_t> sample_shape() const;  // one input sample's shape: {in}, or {1, 8, 8} for images
  int64_t num_classes() const;                // width of y / number of labels
  int64_t num_samples_per_rank() const;       // DistributedSampler's num_samples
  int64_t batches_per_epoch() const;          // the DataLoader's batches per rank and epoch (before --uneven);
                                              // gpt: its one "epoch" of steps x no_sync micro-batches
  int64_t epoch_count() const { return is_gpt() ? 1 : epochs; }
  // d loss for each micro-batch's backward: 1, or 1/K under --no-sync K with --no-sync-loss divide; then, with
  // --loss-divisor D, divided by D: autograd's chain for ((loss / D) / K).backward(), in float32 as torch's.
  float micro_batch_grad() const {
    float g = no_sync_loss == NoSyncLoss::divide ? 1.0f / static_cast<float>(no_sync) : 1.0f;
    if (loss_divisor > 1) g = g / static_cast<float>(loss_divisor);
    return g;
  }
};

constexpr int64_t kMaxWorldSize = 64;

// Every flag below comes from one table in config.cc (name, usage line, Config member, limits or choices;
// the default is Config's): the names, the usage text, the parsing, to_args and the ranks' agreement.
// The flags Config reads, for Flags' list of known names.
std::set<std::string> config_flag_names();
// Reads and validates every flag; throws UsageError naming the flag and its limit. `defaults`, when given,
// changes Config's defaults first (a program's own: ddp_questions' topics); the flags given still win.
Config config_from_flags(const Flags& flags, void (*defaults)(Config&) = nullptr);
// Cross-field checks (also run by config_from_flags), and the size limits of src/base/limits.h.
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
// What describe() cannot say in a word, one line each ("" when nothing): how --no-sync K combines the
// micro-batch losses, and that every rank trains on the same batches (--model gpt seeded alike).
std::string describe_notes(const Config& cfg);
// Why DDP's semantics leave the ranks' parameters different under `c` ("" when they stay bitwise equal):
// --sync-on first|never, --comm-hook noop, or --init per-rank without the broadcast.
std::string ranks_differ_by_design(const Config& c);
// The usage text of the shared flags.
const char* config_usage();
// A default --model gpt Config: nanoGPT's defaults (batch size 4, seed 1337, lr 1e-3, AdamW, GPL-3's text).
Config gpt_config();
// Whether argv names --model gpt (the defaults differ: nanoGPT's batch size, seed and learning rate).
bool wants_gpt(int argc, char** argv);

}  // namespace ddplab::ddp
