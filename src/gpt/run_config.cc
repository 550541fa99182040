// --model gpt's flags: nanoGPT's config names with dashes, each read with its limit (UsageError otherwise).
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "src/gpt/train.h"
#include "src/limits.h"

namespace ddplab::gpt {

namespace {

const char* const kUsage = R"(--model gpt (a tiny GPT: karpathy/nanoGPT's model.py and train.py, under torch 1.13 DDP):
  --n-layer L [2]  --n-head H [2]  --n-embd C [32] (a multiple of H)  --block-size T [16]
  --dropout P [0]  --bias true|false [true]  --gelu none|tanh [none]
  --dataset text   --data FILE [/usr/share/common-licenses/GPL-3]: vocabulary = the file's sorted distinct bytes,
                   train = the first 90%, val = the rest; each rank's batches from its own generator (get_batch)
  --batch-size B [4] per rank   --world-size N [2]   --seed S [1337]   --seed-per-rank (rank r seeds S + r)
  --steps N [4] optimizer steps, each of --no-sync K [1] micro-batches (gradient accumulation, loss / K)
  --eval-every N [0: never]  --eval-iters M [2]   (estimate_loss: train and val, every rank)
  --optimizer adamw  --lr X [0.001]  --weight-decay X [0.1]  --betas B1,B2 [0.9,0.95]  (eps 1e-8)
  --clip-grad-norm X [0: off]       clip_grad_norm_ after the all-reduce; prints the total norm
  --aux-head-every K [0: none]      an aux_head Linear used only on steps with step % K == 0
  --find-unused-parameters true|false [false]   --static-graph true|false [false]
  --gradient-as-bucket-view true|false [false]  --zero-grad none|zeros [none]   --bucket-cap-mb X [25]
)";

bool parse_bool(const Flags& f, const char* name, bool def) { return f.get_bool(name, def); }

}  // namespace

bool wants_gpt(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model=gpt" || (a == "--model" && i + 1 < argc && std::string(argv[i + 1]) == "gpt")) return true;
  }
  return false;
}

std::set<std::string> gpt_flag_names() {
  return {"model",
          "n-layer",
          "n-head",
          "n-embd",
          "block-size",
          "dropout",
          "bias",
          "gelu",
          "dataset",
          "data",
          "batch-size",
          "world-size",
          "seed",
          "seed-per-rank",
          "steps",
          "no-sync",
          "eval-every",
          "eval-iters",
          "optimizer",
          "lr",
          "weight-decay",
          "betas",
          "clip-grad-norm",
          "aux-head-every",
          "find-unused-parameters",
          "static-graph",
          "gradient-as-bucket-view",
          "zero-grad",
          "bucket-cap-mb",
          "comm-hook",
          "powersgd-rank",
          "powersgd-start-iter"};
}

const char* gpt_usage() {
  static const std::string usage = std::string(kUsage) + ddp::comm_hook_usage();
  return usage.c_str();
}

RunConfig gpt_config_from_flags(const Flags& f) {
  RunConfig c;
  GptConfig& m = c.model;
  m.n_layer = f.get_int("n-layer", m.n_layer, 1, 48);
  m.n_head = f.get_int("n-head", m.n_head, 1, 64);
  m.n_embd = f.get_int("n-embd", m.n_embd, 1, 2048);
  if (m.n_embd % m.n_head != 0) {
    throw UsageError(fmt::format("--n-embd must be a multiple of --n-head (got {} and {})", m.n_embd, m.n_head));
  }
  m.block_size = f.get_int("block-size", m.block_size, 1, 1024);
  m.dropout = f.get_double("dropout", m.dropout, 0.0, 1.0);
  if (m.dropout == 1.0) {  // nn.Dropout(1.0) zeroes everything: nothing would train (and the oracle refuses it)
    throw UsageError("--dropout must be in [0, 1) (got 1)");
  }
  m.bias = parse_bool(f, "bias", m.bias);
  m.gelu = f.get_choice("gelu", "none", {"none", "tanh"}) == "tanh" ? nn::GeluApproximate::kTanh
                                                                    : nn::GeluApproximate::kNone;
  m.aux_head_every = f.get_int("aux-head-every", 0, 0, 1000000);
  f.get_choice("dataset", "text", {"text"});
  c.data = f.get_string("data", c.data);
  c.batch_size = f.get_int("batch-size", c.batch_size, 1, 1024);
  c.world_size = f.get_int("world-size", c.world_size, 1, 64);
  c.seed = static_cast<uint64_t>(f.get_int("seed", static_cast<int64_t>(c.seed), 0, INT64_MAX));
  c.seed_per_rank = parse_bool(f, "seed-per-rank", false);
  c.steps = f.get_int("steps", c.steps, 0, 1000000);
  c.no_sync = f.get_int("no-sync", c.no_sync, 1, 1024);
  c.eval_every = f.get_int("eval-every", c.eval_every, 0, 1000000);
  c.eval_iters = f.get_int("eval-iters", c.eval_iters, 1, 10000);
  f.get_choice("optimizer", "adamw", {"adamw"});
  c.lr = f.get_double("lr", c.lr, 0.0, 10.0);
  c.weight_decay = f.get_double("weight-decay", c.weight_decay, 0.0, 10.0);
  const std::string betas = f.get_string("betas", "0.9,0.95");
  {
    std::istringstream in(betas);
    char comma = 0;
    double b1 = -1, b2 = -1;
    if (!(in >> b1 >> comma >> b2) || comma != ',' || !in.eof() || !(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1)) {
      throw UsageError("--betas must be two numbers in [0, 1) as B1,B2 (got '" + betas + "')");
    }
    c.beta1 = b1;
    c.beta2 = b2;
  }
  c.clip_grad_norm = f.get_double("clip-grad-norm", 0.0, 0.0, 1e9);
  c.find_unused_parameters = parse_bool(f, "find-unused-parameters", false);
  c.static_graph = parse_bool(f, "static-graph", false);
  c.gradient_as_bucket_view = parse_bool(f, "gradient-as-bucket-view", false);
  c.zero_grad_set_to_none = f.get_choice("zero-grad", "none", {"none", "zeros"}) == "none";
  c.bucket_cap_mb = f.get_double("bucket-cap-mb", c.bucket_cap_mb, 1e-6, 1e6);
  ddp::read_comm_hook_flags(f, c.comm_hook);
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
  check_gpt_footprint(c, "--world-size");
  return c;
}

int64_t gpt_parameter_count(const GptConfig& m, int64_t vocab_size) {
  const int64_t C = m.n_embd, b = m.bias ? 1 : 0;
  // Per block: ln_1, c_attn (C -> 3C), attn.c_proj (C -> C), ln_2, c_fc (C -> 4C), mlp.c_proj (4C -> C).
  const int64_t block =
      (C + b * C) * 2 + (3 * C * C + b * 3 * C) + (C * C + b * C) + (4 * C * C + b * 4 * C) + (4 * C * C + b * C);
  const int64_t heads = m.aux_head_every > 0 ? 2 : 1;  // lm_head is tied to wte: one parameter
  return vocab_size * C * heads + m.block_size * C + m.n_layer * block + C + b * C;
}

void check_gpt_footprint(const RunConfig& c, const std::string& ranks_flag) {
  const GptConfig& m = c.model;
  const int64_t vocab = m.vocab_size > 0 ? m.vocab_size : 256;  // before the data is read: a byte vocabulary's most
  Footprint f;
  f.parameters = gpt_parameter_count(m, vocab);
  f.copies = 5;               // the parameter, its gradient, its bucket slot, AdamW's exp_avg and exp_avg_sq
  f.replicas = c.world_size;  // the simulator holds them all; ddp_verify's rank 0 runs the simulator
  // One rank's activations kept for the backward: per layer ~17 x B T C floats plus 3 x B H T T for attention,
  // then ~3 x B T V for the logits and their gradient.
  const int64_t bt = c.batch_size * m.block_size;
  f.activations = m.n_layer * (17 * bt * m.n_embd + 3 * bt * m.n_head * m.block_size) + 3 * bt * vocab;
  check_footprint(f, "--model gpt: --n-layer, --n-embd, --block-size, --batch-size, " + ranks_flag);
}

std::vector<std::string> gpt_to_args(const RunConfig& c) {
  const GptConfig& m = c.model;
  std::vector<std::string> a = {"--model",
                                "gpt",
                                "--n-layer",
                                std::to_string(m.n_layer),
                                "--n-head",
                                std::to_string(m.n_head),
                                "--n-embd",
                                std::to_string(m.n_embd),
                                "--block-size",
                                std::to_string(m.block_size),
                                "--dropout",
                                fmt::format("{}", m.dropout),
                                "--bias",
                                m.bias ? "true" : "false",
                                "--gelu",
                                m.gelu == nn::GeluApproximate::kTanh ? "tanh" : "none",
                                "--aux-head-every",
                                std::to_string(m.aux_head_every),
                                "--data",
                                c.data,
                                "--batch-size",
                                std::to_string(c.batch_size),
                                "--world-size",
                                std::to_string(c.world_size),
                                "--seed",
                                std::to_string(c.seed),
                                "--seed-per-rank",
                                c.seed_per_rank ? "true" : "false",
                                "--steps",
                                std::to_string(c.steps),
                                "--no-sync",
                                std::to_string(c.no_sync),
                                "--eval-every",
                                std::to_string(c.eval_every),
                                "--eval-iters",
                                std::to_string(c.eval_iters),
                                "--lr",
                                fmt::format("{}", c.lr),
                                "--weight-decay",
                                fmt::format("{}", c.weight_decay),
                                "--betas",
                                fmt::format("{},{}", c.beta1, c.beta2),
                                "--clip-grad-norm",
                                fmt::format("{}", c.clip_grad_norm),
                                "--find-unused-parameters",
                                c.find_unused_parameters ? "true" : "false",
                                "--static-graph",
                                c.static_graph ? "true" : "false",
                                "--gradient-as-bucket-view",
                                c.gradient_as_bucket_view ? "true" : "false",
                                "--zero-grad",
                                c.zero_grad_set_to_none ? "none" : "zeros",
                                "--bucket-cap-mb",
                                fmt::format("{}", c.bucket_cap_mb)};
  if (c.comm_hook.name != "none") {  // added after the first goldens: written only when used
    a.insert(a.end(), {"--comm-hook", c.comm_hook.name});
    if (c.comm_hook.name == "powersgd") {
      a.insert(a.end(), {"--powersgd-rank", std::to_string(c.comm_hook.powersgd_rank), "--powersgd-start-iter",
                         std::to_string(c.comm_hook.powersgd_start_iter)});
    }
  }
  return a;
}

std::string describe(const RunConfig& c) {
  const GptConfig& m = c.model;
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
  if (c.comm_hook.name != "none") s += " | " + ddp::describe(c.comm_hook);
  return s;
}

}  // namespace ddplab::gpt
