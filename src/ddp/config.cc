#include "src/ddp/config.h"

#include "src/ddp/flag_table.h"

#include <algorithm>
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

namespace {

}  // namespace

Config config_from_flags(const Flags& flags) {
  Config c;
  c.model = flags.get_string("model", c.model);
  if (c.is_gpt()) apply_gpt_defaults(c);
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

namespace {

// --model gpt's own checks, and the footprint of its parameters, AdamW state and activations.
void validate_gpt(const Config& c) {
  const gpt::GptConfig& m = c.gpt;
  if (m.n_embd % m.n_head != 0) {
    throw UsageError(fmt::format("--n-embd must be a multiple of --n-head (got {} and {})", m.n_embd, m.n_head));
  }
  if (c.dataset != DatasetKind::text) throw UsageError("--model gpt trains on --dataset text (nanoGPT's get_batch)");
  if (c.optimizer != OptimizerKind::adamw) throw UsageError("--model gpt trains with --optimizer adamw (nanoGPT's)");
  if (c.static_graph && m.aux_head_every > 1) {
    throw UsageError("--static-graph true needs the same parameters used every iteration (got --aux-head-every " +
                     std::to_string(m.aux_head_every) + "); use --find-unused-parameters true instead");
  }
  if (c.static_graph && c.no_sync > 1) {  // measured: tests/golden/gpt/check_facts.py d
    throw UsageError(fmt::format(
        "--static-graph true with --no-sync {}: torch 1.13 fails an internal assert there (expect_autograd_hooks_, "
        "reducer.cpp) at step 1's first backward; use --no-sync 1 or --static-graph false",
        c.no_sync));
  }
  check_footprint(footprint(c), "--model gpt: --n-layer, --n-embd, --block-size, --batch-size, --world-size");
}

}  // namespace

void validate(const Config& c) {
  if (c.comm_hook.name != "none" && c.average != Average::predivide) {
    throw UsageError(fmt::format("--comm-hook {} replaces DDP's averaging: --average must stay predivide (got {})",
                                 c.comm_hook.name, choice_names().average[static_cast<size_t>(c.average)]));
  }
  if (c.join_scope == JoinScope::run && c.no_sync > 1) {
    throw UsageError(fmt::format(
        "--join-scope run pairs each rank's all-reduces across epochs one batch at a time: it takes --no-sync 1 "
        "(got {})",
        c.no_sync));
  }
  if (c.is_gpt()) {
    validate_gpt(c);
    validate_uneven(c);
    return;
  }
  if (c.dataset == DatasetKind::text) throw UsageError("--dataset text is --model gpt's (nanoGPT's get_batch)");
  if (c.optimizer == OptimizerKind::adamw) throw UsageError("--optimizer adamw is --model gpt's (sgd or adam here)");
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
  check_footprint(footprint(c), "--layers, --world-size, --samples, --batch-size");
  validate_uneven(c);
}

Footprint footprint(const Config& c) {
  Footprint f;
  if (c.is_gpt()) {
    const gpt::GptConfig& m = c.gpt;
    const int64_t vocab = m.vocab_size > 0 ? m.vocab_size : 256;  // before the data is read: a byte vocabulary's most
    f.parameters = gpt::gpt_parameter_count(m, vocab);
    f.copies = 5;               // the parameter, its gradient, its bucket slot, AdamW's exp_avg and exp_avg_sq
    f.replicas = c.world_size;  // the simulator holds them all; ddp_verify's rank 0 runs the simulator
    // One rank's activations kept for the backward: per layer ~17 x B T C floats plus 3 x B H T T for attention,
    // then ~3 x B T V for the logits and their gradient.
    const int64_t bt = c.batch_size * m.block_size;
    f.activations = m.n_layer * (17 * bt * m.n_embd + 3 * bt * m.n_head * m.block_size) + 3 * bt * vocab;
    return f;
  }
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

}  // namespace

std::string describe(const Config& c) {
  if (c.is_gpt()) return describe_gpt(c) + describe_tail(c);
  std::string opt = c.optimizer == OptimizerKind::sgd ? fmt::format("sgd lr={} momentum={}", c.lr, c.momentum)
                                                      : fmt::format("adam lr={}", c.lr);
  std::string model = fmt::format("MLP {}{}", fmt::join(c.layers, "-"), c.relu ? " relu" : "");
  if (!c.is_mlp()) model = fmt::format("model {} ({} parameters)", c.model, footprint(c).parameters);
  std::string extra;
  if (c.seed_per_rank) extra += " | seed_per_rank";
  if (!c.broadcast_buffers) extra += " | broadcast_buffers=false";
  if (c.comm_hook.name != "none") extra += " | " + describe(c.comm_hook);
  if (c.find_unused_parameters) extra += " | find_unused_parameters";
  if (c.clip_grad_norm > 0) extra += fmt::format(" | clip {}", c.clip_grad_norm);
  extra += describe_tail(c);
  return fmt::format(
      "world_size={} | {} | {} | {} | {} dataset, {} samples | batch {}/rank | shuffle={} drop_last={} | "
      "init={} broadcast={} | average={} | bucket_cap_mb={} | no_sync={} | allreduce={} | kernels={}{}",
      c.world_size, model, loss_name(c.loss), opt, dataset_name(c.dataset), c.dataset_size(), c.batch_size, c.shuffle,
      c.drop_last, init_name(c.init), c.broadcast, choice_names().average[static_cast<size_t>(c.average)],
      c.bucket_cap_mb, c.no_sync, collective::algorithm_name(c.allreduce), kernels_name(c.kernels), extra);
}

}  // namespace ddplab::ddp
