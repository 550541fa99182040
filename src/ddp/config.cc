#include "src/ddp/config.h"

#include <functional>
#include <stdexcept>

#include <fmt/format.h>

#include "src/data.h"
#include "src/ddp/join.h"
#include "src/limits.h"
#include "src/model/spec.h"
#include "src/nn.h"

namespace ddplab::ddp {

int64_t Config::dataset_size() const {
  if (dataset == DatasetKind::toy) return 5;
  if (dataset == DatasetKind::digits) return kDigitsTrain;
  return samples;
}

std::string Config::model_spec() const {
  if (model == "mlp") return mlp_spec(layers, relu);
  if (model == "cnn") return kCnnSpec;
  return model;
}

std::vector<int64_t> Config::sample_shape() const {
  if (dataset != DatasetKind::digits) return {layers.front()};
  if (model == "mlp") return {64};  // the MLP reads each image flattened, x.view(N, -1)
  return {1, 8, 8};
}

int64_t Config::num_classes() const { return dataset == DatasetKind::digits ? 10 : layers.back(); }

int64_t Config::num_samples_per_rank() const {
  const int64_t n = dataset_size();
  if (drop_last && n % world_size != 0) return (n - world_size + world_size - 1) / world_size;
  return (n + world_size - 1) / world_size;
}

int64_t Config::batches_per_epoch() const {
  const int64_t per_rank = num_samples_per_rank();
  return loader_drop_last ? per_rank / batch_size : (per_rank + batch_size - 1) / batch_size;
}

namespace {

size_t index_of(const std::vector<std::string>& names, const std::string& s, const char* what) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == s) return i;
  }
  throw std::invalid_argument(fmt::format("unknown {} '{}'", what, s));
}

// The names of every choice flag, each list in the order of its enum (the value is the name's index); the
// all-reduce algorithms' and the kernels' live beside their enums.
struct ChoiceNames {
  std::vector<std::string> activation, loss, optimizer, dataset, init, average, join_divide;
};
const ChoiceNames& choice_names() {
  static const ChoiceNames n = {{"none", "relu"},
                                {"mse", "ce", "ce-probs"},
                                {"sgd", "adam"},
                                {"random", "toy", "rand", "digits"},
                                {"same", "per-rank", "continue"},
                                {"predivide", "postdivide", "avg"},
                                {"initial", "active"}};
  return n;
}

// One row of the flag table: its name, its part of the usage text ("{def}" stands for the default, the
// value of a default Config; "{choices}" for a choice flag's list), and how it reads (with its limits or
// choices) and writes its Config member.
struct FlagSpec {
  const char* name;
  const char* usage;
  std::function<void(const Flags&, Config&)> read;  // `c` holds the default when called
  std::function<std::string(const Config&)> write;  // as to_args writes it
  // Flags added after the first goldens: to_args leaves them out while they hold their default, so the
  // dumps (and hashes) of every run that does not use them stay as they were.
  bool omit_default = false;
  const std::vector<std::string>* choices = nullptr;  // a choice flag's names, for the usage text
};

template <class T>
FlagSpec int_flag(const char* name, T Config::*m, int64_t min, int64_t max, const char* usage) {
  return {
      name, usage,
      [=](const Flags& f, Config& c) { c.*m = static_cast<T>(f.get_int(name, static_cast<int64_t>(c.*m), min, max)); },
      [=](const Config& c) { return std::to_string(c.*m); }};
}

FlagSpec double_flag(const char* name, double Config::*m, double min, double max, const char* usage) {
  return {name, usage, [=](const Flags& f, Config& c) { c.*m = f.get_double(name, c.*m, min, max); },
          [=](const Config& c) { return fmt::format("{}", c.*m); }};
}

FlagSpec bool_flag(const char* name, bool Config::*m, const char* usage) {
  return {name, usage, [=](const Flags& f, Config& c) { c.*m = f.get_bool(name, c.*m); },
          [=](const Config& c) { return std::string(c.*m ? "true" : "false"); }};
}

// An enum whose values are the indexes of `names` (a list that lives as long as the program).
template <class E>
FlagSpec choice_flag(const char* name, E Config::*m, const std::vector<std::string>& names, const char* usage) {
  const std::vector<std::string>* n = &names;
  return {name,
          usage,
          [=](const Flags& f, Config& c) {
            const std::string v = f.get_choice(name, (*n)[static_cast<size_t>(c.*m)], *n);
            c.*m = static_cast<E>(index_of(*n, v, name));
          },
          [=](const Config& c) { return (*n)[static_cast<size_t>(c.*m)]; },
          false,
          n};
}

// The flags, in the order of the usage text, of parsing and of to_args.
const std::vector<FlagSpec>& flag_table() {
  static const std::vector<FlagSpec> table = {
      int_flag("world-size", &Config::world_size, 1, kMaxWorldSize,
               "model and data (PyTorch's names; defaults in brackets):\n"
               "  --world-size N            replicas / ranks, 1..64 [{def}]\n"),
      {"model",
       "  --model mlp|cnn|SPEC      mlp: --layers with --activation; cnn: a LeNet-sized net for --dataset digits;\n"
       "                            SPEC: layers in nn.Sequential order with PyTorch's arguments, e.g.\n"
       "                            conv2d(1,8,3,padding=1),batchnorm2d(8),relu,maxpool2d(2),flatten,linear(128,10) "
       "[{def}]\n",
       [](const Flags& f, Config& c) {
         c.model = f.get_string("model", c.model);
         if (c.model.empty() || c.model.size() > 4096) {
           throw UsageError(
               fmt::format("--model takes mlp, cnn or a spec of at most 4096 characters (got {})", c.model.size()));
         }
       },
       [](const Config& c) { return c.model; }, true},
      {"layers", "  --layers 6,4,2            MLP sizes, >= 2 entries [{def}]\n",
       [](const Flags& f, Config& c) {
         c.layers = f.get_int_list("layers", c.layers, 1, 1 << 16);
         if (c.layers.size() < 2) {
           throw UsageError(
               fmt::format("--layers needs at least two sizes, input and output (got {})", c.layers.size()));
         }
       },
       [](const Config& c) { return fmt::format("{}", fmt::join(c.layers, ",")); }},
      {"activation", "  --activation {choices}    between layers [{def}]\n",
       [](const Flags& f, Config& c) {
         const auto& names = choice_names().activation;  // none, relu: relu is the bool
         c.relu = index_of(names, f.get_choice("activation", names[c.relu], names), "activation") == 1;
       },
       [](const Config& c) { return choice_names().activation[c.relu]; }, false, &choice_names().activation},
      choice_flag("loss", &Config::loss, choice_names().loss,
                  "  --loss {choices}    MSELoss, CrossEntropyLoss (labels = argmax of y), or cross_entropy "
                  "with y as\n"
                  "                            class probabilities (notebook 003's F.cross_entropy on float targets) "
                  "[{def}]\n"),
      choice_flag("optimizer", &Config::optimizer, choice_names().optimizer,
                  "  --optimizer {choices}      [{def}]    "),
      double_flag("lr", &Config::lr, 0.0, 1e6, "--lr LR [{def}]    "),
      double_flag("momentum", &Config::momentum, 0.0, 1.0, "--momentum M (sgd) [{def}]\n"),
      choice_flag("dataset", &Config::dataset, choice_names().dataset,
                  "  --dataset {choices} random: notebook 000's RandomTensorDataset (randn); toy: "
                  "notebook 001's 5 points;\n"
                  "                            rand: notebook 003's MyTrainDataset (rand(in), rand(out) per sample);\n"
                  "                            digits: scikit-learn's 1797 8x8 digits, 1500 to train, 297 to test "
                  "[{def}]\n"),
      {"data", "  --data FILE               --dataset digits: a copy of scikit-learn's digits.csv.gz [its own]\n",
       [](const Flags& f, Config& c) { c.data = f.get_string("data", c.data); }, [](const Config& c) { return c.data; },
       true},
      int_flag("samples", &Config::samples, 1, 1 << 22,
               "  --samples N               random dataset size [{def}]       "),
      int_flag("seed", &Config::seed, 0, INT64_MAX, "--seed S   manual_seed for data and model [{def}]\n"),
      bool_flag("shuffle", &Config::shuffle, "  --shuffle true|false      DistributedSampler shuffle [{def}]   "),
      int_flag("sampler-seed", &Config::sampler_seed, 0, INT64_MAX, "--sampler-seed S [{def}]\n"),
      bool_flag("drop-last", &Config::drop_last, "  --drop-last true|false    DistributedSampler drop_last [{def}]\n"),
      bool_flag("loader-drop-last", &Config::loader_drop_last,
                "  --loader-drop-last true|false  DataLoader drop_last [{def}]\n"),
      bool_flag("set-epoch", &Config::set_epoch,
                "  --set-epoch true|false    call sampler.set_epoch(epoch) each epoch [{def}]\n"),
      int_flag("batch-size", &Config::batch_size, 1, 1 << 22, "  --batch-size B            per rank [{def}]        "),
      int_flag("epochs", &Config::epochs, 1, 100000, "--epochs E [{def}]\n"),
      choice_flag("init", &Config::init, choice_names().init,
                  "DDP:\n"
                  "  --init {choices}  seed the model with --seed, with seed + rank, or not at all: "
                  "continue\n"
                  "                            the data's random stream, as notebook 003 does [{def}]\n"),
      bool_flag("broadcast", &Config::broadcast,
                "  --broadcast true|false    broadcast rank 0's parameters at construction, as DDP does [{def}]\n"),
      {"broadcast-buffers",
       "  --broadcast-buffers true|false  broadcast rank 0's buffers (BatchNorm's running stats) before every\n"
       "                            training forward, as DDP's broadcast_buffers does [{def}]\n",
       [](const Flags& f, Config& c) { c.broadcast_buffers = f.get_bool("broadcast-buffers", c.broadcast_buffers); },
       [](const Config& c) { return std::string(c.broadcast_buffers ? "true" : "false"); }, true},
      {"seed-per-rank",
       "  --seed-per-rank true|false  after DDP(model) each rank calls manual_seed(seed + rank): its Dropout masks\n"
       "                            (and loader draws) differ from the other ranks' [{def}]\n",
       [](const Flags& f, Config& c) { c.seed_per_rank = f.get_bool("seed-per-rank", c.seed_per_rank); },
       [](const Config& c) { return std::string(c.seed_per_rank ? "true" : "false"); }, true},
      choice_flag("average", &Config::average, choice_names().average,
                  "  --average {choices}   grad*(1/ws) then SUM (PyTorch) | SUM then /ws (notebook) | "
                  "ncclAvg [{def}]\n"),
      double_flag("bucket-cap-mb", &Config::bucket_cap_mb, 1e-6, 1e6,
                  "  --bucket-cap-mb MB        bucket size cap; the first bucket is 1 MiB [{def}]\n"),
      int_flag("no-sync", &Config::no_sync, 1, 1 << 20,
               "  --no-sync K               all-reduce every K micro-batches (no_sync in between) [{def}]\n"),
      choice_flag("allreduce", &Config::allreduce, collective::algorithm_names(),
                  "  --allreduce {choices}   the simulator's algorithm; ring "
                  "matches Gloo,\n"
                  "                            nccl-ring matches NCCL pinned by ddp_verify --nccl-exact [{def}]\n"),
      // --comm-hook, --powersgd-rank, --powersgd-start-iter: read together (comm_hook.h), written one by one.
      {"comm-hook", comm_hook_usage(), [](const Flags& f, Config& c) { read_comm_hook_flags(f, c.comm_hook); },
       [](const Config& c) { return c.comm_hook.name; }, true},
      {"powersgd-rank", "", [](const Flags&, Config&) {},
       [](const Config& c) { return std::to_string(c.comm_hook.powersgd_rank); }, true},
      {"powersgd-start-iter", "", [](const Flags&, Config&) {},
       [](const Config& c) { return std::to_string(c.comm_hook.powersgd_start_iter); }, true},
      choice_flag("kernels", &Config::kernels, kernels_names(),
                  "  --kernels {choices}  Linear on OpenBLAS with PyTorch's calls, or on fixed-order loops that "
                  "a GPU\n"
                  "                            (ddp_verify --backend nccl) reproduces bit for bit [{def}]\n"),
      {"zero",
       "  --zero true|false         the optimizer as torch's ZeroRedundancyOptimizer: each rank keeps state for and\n"
       "                            steps its shard of the parameters, then broadcasts it (same bits as plain) "
       "[{def}]\n",
       [](const Flags& f, Config& c) { c.zero = f.get_bool("zero", c.zero); },
       [](const Config& c) { return std::string(c.zero ? "true" : "false"); }, true},
      // Issue 18's Join: added after the goldens, so left out of to_args at their defaults.
      {"uneven",
       "uneven inputs (torch.distributed.algorithms.Join):\n"
       "  --uneven K                rank r trains on the first B - K*r of its B batches per epoch [{def}]\n",
       [](const Flags& f, Config& c) { c.uneven = f.get_int("uneven", c.uneven, 0, 1 << 22); },
       [](const Config& c) { return std::to_string(c.uneven); }, true},
      {"join",
       "  --join true|false         inside Join([ddp]) (one per epoch): ranks out of batches shadow the\n"
       "                            all-reduces with zeros; without it the run stops where PyTorch's would hang "
       "[{def}]\n",
       [](const Flags& f, Config& c) { c.join = f.get_bool("join", c.join); },
       [](const Config& c) { return std::string(c.join ? "true" : "false"); }, true},
      {"join-divide",
       "  --join-divide {choices}  divide by the world size (divide_by_initial_world_size=True) or by the\n"
       "                            ranks not yet joined (False) [{def}]\n",
       [](const Flags& f, Config& c) {
         const auto& names = choice_names().join_divide;
         c.join_divide_active =
             index_of(names, f.get_choice("join-divide", names[c.join_divide_active], names), "join-divide") == 1;
       },
       [](const Config& c) { return choice_names().join_divide[c.join_divide_active]; }, true,
       &choice_names().join_divide},
  };
  return table;
}

}  // namespace

const std::string& loss_name(LossKind k) { return choice_names().loss[static_cast<size_t>(k)]; }
const std::string& dataset_name(DatasetKind k) { return choice_names().dataset[static_cast<size_t>(k)]; }
const std::string& init_name(InitKind k) { return choice_names().init[static_cast<size_t>(k)]; }
LossKind parse_loss(const std::string& s) { return static_cast<LossKind>(index_of(choice_names().loss, s, "loss")); }
OptimizerKind parse_optimizer(const std::string& s) {
  return static_cast<OptimizerKind>(index_of(choice_names().optimizer, s, "optimizer"));
}
InitKind parse_init(const std::string& s) { return static_cast<InitKind>(index_of(choice_names().init, s, "init")); }

std::set<std::string> config_flag_names() {
  std::set<std::string> names;
  for (const FlagSpec& f : flag_table()) names.insert(f.name);
  return names;
}

const char* config_usage() {
  static const std::string usage = [] {
    const Config def;
    std::string u;
    for (const FlagSpec& f : flag_table()) {
      std::string line = f.usage;
      if (const size_t at = line.find("{choices}"); at != std::string::npos) {
        line.replace(at, 9, fmt::format("{}", fmt::join(*f.choices, "|")));
      }
      if (const size_t at = line.find("{def}"); at != std::string::npos) line.replace(at, 5, f.write(def));
      u += line;
    }
    return u;
  }();
  return usage.c_str();
}

Config config_from_flags(const Flags& flags) {
  Config c;
  for (const FlagSpec& f : flag_table()) f.read(flags, c);
  if (c.dataset == DatasetKind::digits && !flags.has("loss")) c.loss = LossKind::ce;  // labels 0..9
  validate(c);
  return c;
}

void validate(const Config& c) {
  if (c.dataset == DatasetKind::toy && (c.layers.front() != 2 || c.layers.back() != 2)) {
    throw UsageError(
        fmt::format("--dataset toy has 2 features and 2 classes: --layers must start and end with 2 "
                    "(got {})",
                    fmt::join(c.layers, ",")));
  }
  if (c.dataset_size() < c.world_size) {
    throw UsageError(fmt::format("--world-size {} exceeds the dataset size {}: every rank needs a sample", c.world_size,
                                 c.dataset_size()));
  }
  if (c.dataset == DatasetKind::digits) {
    if (c.loss != LossKind::ce) throw UsageError("--dataset digits has labels 0..9: it trains with --loss ce");
    if (c.is_mlp() && (c.layers.front() != 64 || c.layers.back() != 10)) {
      throw UsageError(
          fmt::format("--dataset digits has 64 pixels and 10 classes: --layers must start with 64 and "
                      "end with 10 (got {})",
                      fmt::join(c.layers, ",")));
    }
  }
  const ModelPlan plan = plan_model(c.model_spec(), c.sample_shape());
  const std::vector<int64_t> want = {c.num_classes()};
  if (plan.shapes.back() != want) {
    throw UsageError(fmt::format("--model: the last layer gives {} values per sample; --dataset {} needs {}",
                                 fmt::join(plan.shapes.back(), "x"), dataset_name(c.dataset), c.num_classes()));
  }
  const int64_t shard = c.num_samples_per_rank();
  if (c.batch_size > shard) {
    throw UsageError(
        fmt::format("--batch-size {} is larger than a rank's shard of {} samples "
                    "(dataset {} / world size {})",
                    c.batch_size, shard, c.dataset_size(), c.world_size));
  }
  if (c.comm_hook.name != "none" && c.average != Average::predivide) {
    throw UsageError(fmt::format("--comm-hook {} replaces DDP's averaging: --average must stay predivide (got {})",
                                 c.comm_hook.name, choice_names().average[static_cast<size_t>(c.average)]));
  }
  check_footprint(footprint(c), "--layers, --world-size, --samples, --batch-size");
  validate_uneven(c);
}

Footprint footprint(const Config& c) {
  Footprint f;
  int64_t widths = 0;
  if (c.is_mlp()) {
    for (size_t i = 0; i < c.layers.size(); ++i) {
      widths += c.layers[i];
      if (i + 1 < c.layers.size()) f.parameters += c.layers[i] * c.layers[i + 1] + c.layers[i + 1];
    }
  } else {  // validate() has planned it once already; planning allocates nothing
    const ModelPlan plan = plan_model(c.model_spec(), c.sample_shape());
    f.parameters = plan.parameters;
    widths = plan.activations;
  }
  f.replicas = c.world_size;  // the simulator holds them all; ddp_verify's rank 0 runs the simulator
  f.copies = 3 + (c.momentum > 0 ? 1 : 0) + (c.optimizer == OptimizerKind::adam ? 2 : 0);
  int64_t sample = 1;
  for (int64_t d : c.sample_shape()) sample *= d;
  f.data = c.dataset_size() * (sample + c.num_classes());
  f.activations = 2 * c.batch_size * widths;  // outputs and their gradients
  return f;
}

std::vector<std::string> to_args(const Config& c) {
  std::vector<std::string> args;
  const Config def;
  for (const FlagSpec& f : flag_table()) {
    if (f.omit_default && f.write(c) == f.write(def)) continue;
    args.push_back(std::string("--") + f.name);
    args.push_back(f.write(c));
  }
  return args;
}

std::pair<std::string, int64_t> last_parameter(const Config& c) {
  if (c.is_mlp()) return {MLP::sequential_names(c.layers.size() - 1, c.relu).back() + ".bias", c.layers.back()};
  Generator gen;  // a small model: build it and look
  const Sequential m = build_model(plan_model(c.model_spec(), c.sample_shape()), "", gen);
  const Parameter& p = *m.parameters().back();
  return {p.name, p.numel()};
}

std::string describe(const Config& c) {
  std::string opt = c.optimizer == OptimizerKind::sgd ? fmt::format("sgd lr={} momentum={}", c.lr, c.momentum)
                                                      : fmt::format("adam lr={}", c.lr);
  std::string model = fmt::format("MLP {}{}", fmt::join(c.layers, "-"), c.relu ? " relu" : "");
  if (!c.is_mlp()) model = fmt::format("model {} ({} parameters)", c.model, footprint(c).parameters);
  std::string extra;
  if (c.seed_per_rank) extra += " | seed_per_rank";
  if (!c.broadcast_buffers) extra += " | broadcast_buffers=false";
  if (c.zero) extra += " | ZeroRedundancyOptimizer";
  if (c.comm_hook.name != "none") extra += " | " + describe(c.comm_hook);
  if (c.uneven > 0) extra += fmt::format(" | uneven={}", c.uneven);
  if (c.join) extra += fmt::format(" | join divide_by_initial_world_size={}", c.join_divide_active ? "False" : "True");
  return fmt::format(
      "world_size={} | {} | {} | {} | {} dataset, {} samples | batch {}/rank | shuffle={} drop_last={} | "
      "init={} broadcast={} | average={} | bucket_cap_mb={} | no_sync={} | allreduce={} | kernels={}{}",
      c.world_size, model, loss_name(c.loss), opt, dataset_name(c.dataset), c.dataset_size(), c.batch_size, c.shuffle,
      c.drop_last, init_name(c.init), c.broadcast, choice_names().average[static_cast<size_t>(c.average)],
      c.bucket_cap_mb, c.no_sync, collective::algorithm_name(c.allreduce), kernels_name(c.kernels), extra);
}

}  // namespace ddplab::ddp
