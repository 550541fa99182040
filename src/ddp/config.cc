#include "src/ddp/config.h"

#include "src/ddp/flag_table.h"

#include <algorithm>
#include <functional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "src/data/data.h"
#include "src/ddp/join.h"
#include "src/base/limits.h"
#include "src/model/spec.h"
#include "src/model/linear.h"

namespace ddplab::ddp {

int64_t Config::dataset_size() const {
  if (is_gpt()) return 0;  // the text's tokens: known once the file is read
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
  if (is_gpt()) return steps * no_sync;
  const int64_t per_rank = num_samples_per_rank();
  return loader_drop_last ? per_rank / batch_size : (per_rank + batch_size - 1) / batch_size;
}


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

Config gpt_config() {
  Config c;
  c.model = "gpt";
  apply_gpt_defaults(c);
  return c;
}

bool wants_gpt(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model=gpt" || (a == "--model" && i + 1 < argc && std::string(argv[i + 1]) == "gpt")) return true;
  }
  return false;
}

Config config_from_flags(const Flags& flags, void (*defaults)(Config&)) {
  Config c;
  if (defaults != nullptr) defaults(c);
  c.model = flags.get_string("model", c.model);
  if (c.is_gpt()) apply_gpt_defaults(c);
  if (c.model == "cnn") c.dataset = DatasetKind::digits;  // the data it is made for (--dataset still chooses)
  for (const FlagSpec& f : flag_table()) {
    const bool applies = f.applies == Applies::all || (f.applies == Applies::gpt) == c.is_gpt();
    if (applies) {
      f.read(flags, c);
    } else if (flags.has(f.name)) {
      throw UsageError(c.is_gpt() ? fmt::format("--{} is a flag of the sequential models (mlp, cnn, a spec), not of "
                                                "--model gpt", f.name)
                                  : fmt::format("--{} is a flag of --model gpt (got --model {})", f.name,
                                                c.model.size() > 40 ? c.model.substr(0, 40) + "..." : c.model));
    }
  }
  if (c.dataset == DatasetKind::digits && !flags.has("loss")) c.loss = LossKind::ce;  // labels 0..9
  validate(c);
  return c;
}

std::vector<std::string> to_args(const Config& c) {
  std::vector<std::string> args;
  Config def;
  if (c.is_gpt()) {
    def.model = "gpt";
    apply_gpt_defaults(def);
  }
  const auto add = [&](const FlagSpec& f) {
    args.push_back(std::string("--") + f.name);
    args.push_back(f.write(c));
  };
  if (c.is_gpt()) {  // its goldens' order, every flag written; then the later ones, when set
    const auto& order = gpt_args_order();
    for (const std::string& name : order) {
      for (const FlagSpec& f : flag_table()) {
        if (name == f.name) add(f);
      }
    }
    for (const FlagSpec& f : flag_table()) {
      const bool listed = std::find(order.begin(), order.end(), f.name) != order.end();
      if (!listed && f.applies == Applies::all && f.write(c) != f.write(def)) {
        if (std::string(f.name) == "powersgd-rank" || std::string(f.name) == "powersgd-start-iter") {
          if (c.comm_hook.name != "powersgd") continue;
        }
        add(f);
      }
    }
    return args;
  }
  for (const FlagSpec& f : flag_table()) {
    if (f.applies == Applies::gpt || (f.omit_default && f.write(c) == f.write(def))) continue;
    add(f);
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

namespace {

std::string describe_gpt(const Config& c) {
  const gpt::GptConfig& m = c.gpt;
  std::string s = fmt::format(
      "world_size={} | GPT {} layers, {} heads, n_embd {}, block {}, vocab {}{}{}{} | batch {} x {} micro | adamw "
      "lr={} wd={} | {} steps",
      c.world_size, m.n_layer, m.n_head, m.n_embd, m.block_size, m.vocab_size, m.bias ? "" : ", no bias",
      m.dropout > 0 ? fmt::format(", dropout {}", m.dropout) : "",
      m.gelu == nn::GeluApproximate::kTanh ? ", gelu tanh" : "", c.batch_size, c.no_sync, c.lr, c.weight_decay,
      c.steps);
  if (c.clip_grad_norm > 0) s += fmt::format(" | clip {}", c.clip_grad_norm);
  if (m.aux_head_every > 0) {
    s += fmt::format(" | aux head every {} steps, find_unused_parameters={}", m.aux_head_every,
                     c.find_unused_parameters ? "True" : "False");
  }
  if (c.static_graph) s += " | static_graph";
  if (c.gradient_as_bucket_view) s += " | gradient_as_bucket_view";
  s += c.zero_grad_set_to_none ? " | zero_grad(set_to_none=True)" : " | zero_grad(set_to_none=False)";
  if (c.comm_hook.name != "none") s += " | " + describe(c.comm_hook);
  return s;
}

// What every model shares at the end of the line: ZeRO, uneven inputs and Join.
std::string describe_tail(const Config& c) {
  std::string extra;
  if (c.zero) extra += " | ZeroRedundancyOptimizer";
  if (c.uneven > 0) extra += fmt::format(" | uneven={}", c.uneven);
  if (c.join) {
    extra += fmt::format(" | join divide_by_initial_world_size={}", c.join_divide_active ? "False" : "True");
    if (c.join_scope == JoinScope::run) extra += " around all epochs";
  }
  return extra;
}

// Every other flag the run changed from its model's defaults, as `name=value`: with the parts above, the header
// names every option that differs (--static-graph, --sync-on, --seed, ...), for every model. `shown`: the flags the
// header's own parts already say.
std::string other_changes(const Config& c, const std::set<std::string>& shown) {
  Config def;
  if (c.is_gpt()) {
    def.model = "gpt";
    apply_gpt_defaults(def);
  }
  std::string out;
  for (const FlagSpec& f : flag_table()) {
    const std::string name = f.name;
    if (shown.count(name) || name == "data") continue;
    if ((f.applies == Applies::gpt && !c.is_gpt()) || (f.applies == Applies::sequential && c.is_gpt())) continue;
    if (f.write(c) == f.write(def)) continue;
    std::string key = name;
    std::replace(key.begin(), key.end(), '-', '_');
    out += fmt::format(" | {}={}", key, f.write(c));
  }
  return out;
}

// The flags describe() and describe_gpt() show, with describe_tail's.
const std::set<std::string> kTailFlags = {"zero", "uneven", "join", "join-divide", "join-scope", "comm-hook",
                                          "powersgd-rank", "powersgd-start-iter", "clip-grad-norm", "world-size",
                                          "model", "batch-size", "lr", "no-sync", "static-graph",
                                          "gradient-as-bucket-view"};

}  // namespace

std::string describe(const Config& c) {
  if (c.is_gpt()) {
    std::set<std::string> shown = kTailFlags;
    shown.insert({"n-layer", "n-head", "n-embd", "block-size", "dropout", "bias", "gelu", "weight-decay", "steps",
                  "aux-head-every", "zero-grad"});
    if (c.gpt.aux_head_every > 0) shown.insert("find-unused-parameters");
    return describe_gpt(c) + describe_tail(c) + other_changes(c, shown);
  }
  std::string opt = c.optimizer == OptimizerKind::sgd ? fmt::format("sgd lr={} momentum={}", c.lr, c.momentum)
                                                      : fmt::format("adam lr={}", c.lr);
  std::string model = fmt::format("MLP {}{}", fmt::join(c.layers, "-"), c.relu ? " relu" : "");
  if (!c.is_mlp()) model = fmt::format("model {} ({} parameters)", c.model, footprint(c).parameters);
  std::string extra;
  if (c.seed_per_rank) extra += " | seed_per_rank";
  if (c.sync_batchnorm) extra += " | SyncBatchNorm";
  if (!c.broadcast_buffers) extra += " | broadcast_buffers=false";
  if (c.comm_hook.name != "none") extra += " | " + describe(c.comm_hook);
  if (c.find_unused_parameters) extra += " | find_unused_parameters";
  if (c.clip_grad_norm > 0) extra += fmt::format(" | clip {}", c.clip_grad_norm);
  if (c.static_graph) extra += " | static_graph";
  if (c.gradient_as_bucket_view) extra += " | gradient_as_bucket_view";
  extra += describe_tail(c);
  std::set<std::string> shown = kTailFlags;
  shown.insert({"layers", "activation", "loss", "optimizer", "momentum", "dataset", "samples", "shuffle", "drop-last",
                "init", "broadcast", "average", "bucket-cap-mb", "allreduce", "kernels", "seed-per-rank",
                "sync-batchnorm", "broadcast-buffers", "find-unused-parameters"});
  extra += other_changes(c, shown);
  return fmt::format(
      "world_size={} | {} | {} | {} | {} dataset, {} samples | batch {}/rank | shuffle={} drop_last={} | "
      "init={} broadcast={} | average={} | bucket_cap_mb={} | no_sync={} | allreduce={} | kernels={}{}",
      c.world_size, model, loss_name(c.loss), opt, dataset_name(c.dataset), c.dataset_size(), c.batch_size, c.shuffle,
      c.drop_last, init_name(c.init), c.broadcast, choice_names().average[static_cast<size_t>(c.average)],
      c.bucket_cap_mb, c.no_sync, collective::algorithm_name(c.allreduce), kernels_name(c.kernels), extra);
}

std::string ranks_differ_by_design(const Config& c) {
  if (c.world_size < 2) return "";
  if (c.sync_on != SyncOn::last) {
    return "--sync-on " + choice_names().sync_on[static_cast<size_t>(c.sync_on)] +
           ": the ranks step on gradients the all-reduce did not average";
  }
  if (c.comm_hook.name == "noop") return "--comm-hook noop: every rank steps with its own gradients";
  if (!c.broadcast && c.init == InitKind::per_rank) return "--init per-rank without the broadcast: other weights";
  return "";
}

std::string describe_notes(const Config& c) {
  std::string out;
  if (c.no_sync > 1) {
    const int64_t k = c.no_sync;
    out += c.no_sync_loss == NoSyncLoss::sum
               ? fmt::format("no_sync {0}: loss.backward() on each of a step's {0} micro-batches of {1}, so .grad holds "
                             "the sum of {0} micro-batch gradients: {0} times the gradient of one batch of {0} x {1} "
                             "(--no-sync-loss divide: (loss / {0}).backward(), their mean)\n",
                             k, c.batch_size)
               : fmt::format("no_sync {0}: (loss / {0}).backward() on each of a step's {0} micro-batches of {1}, so "
                             ".grad holds their mean: the gradient of one batch of {0} x {1}, up to rounding "
                             "(--no-sync-loss sum: loss.backward() on each, {0} times as large)\n",
                             k, c.batch_size);
  }
  if (c.sync_on == SyncOn::first) {
    out += fmt::format("sync-on first: each step's first micro-batch runs outside no_sync(), so its all-reduce averages "
                       "only that micro-batch's gradients; the other {} add each rank's own, and the ranks step on "
                       "different .grad: the replicas drift apart\n",
                       c.no_sync - 1);
  } else if (c.sync_on == SyncOn::never) {
    out += "sync-on never: every micro-batch runs inside no_sync(), so nothing is all-reduced and each rank steps on "
           "its own gradients: the replicas drift apart\n";
  }
  if (c.is_gpt() && !c.seed_per_rank && c.world_size > 1) {
    out += fmt::format("every rank seeds {0} and draws the same batches: DDP averages {1} equal gradients, as one "
                       "rank would (nanoGPT seeds {0} + rank: --seed-per-rank true, the default)\n",
                       c.seed, c.world_size);
  }
  return out;
}

}  // namespace ddplab::ddp
