// The one flag table: every flag of every model, declared once (see flag_table.h).
#include "src/ddp/flag_table.h"

#include <cstdint>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "src/collective/allreduce.h"
#include "src/tensor/kernels.h"
#include "src/data/text_data.h"

namespace ddplab::ddp {

size_t index_of(const std::vector<std::string>& names, const std::string& s, const char* what) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == s) return i;
  }
  throw std::invalid_argument(fmt::format("unknown {} '{}'", what, s));
}

const ChoiceNames& choice_names() {
  static const ChoiceNames n = {{"none", "relu"},
                                {"mse", "ce", "ce-probs"},
                                {"sgd", "adam", "adamw"},
                                {"random", "toy", "rand", "digits", "text"},
                                {"same", "per-rank", "continue"},
                                {"predivide", "postdivide", "avg", "multiply", "divide-first"},
                                {"initial", "active"},
                                {"epoch", "run"},
                                {"zeros", "none"},
                                {"none", "tanh"},
                                {"sum", "divide"},
                                {"last", "first", "never"},
                                {"none", "per-parameter", "flat", "buckets"}};
  return n;
}

void apply_gpt_defaults(Config& c) {
  c.batch_size = 4;
  c.seed = 1337;
  c.lr = 1e-3;
  c.optimizer = OptimizerKind::adamw;
  c.dataset = DatasetKind::text;
  c.data = kTextDefaultPath;
  c.seed_per_rank = true;  // train.py under DDP: seed_offset = rank, torch.manual_seed(1337 + seed_offset)
  c.no_sync_loss = NoSyncLoss::divide;  // train.py: loss = loss / gradient_accumulation_steps
}

namespace {

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

// The flags, in the order of the usage text, of parsing and of to_args. Each row carries the models it applies
// to: only(Applies::sequential, ...) for the nn.Sequential models' own flags (--model gpt refuses them: its data
// are get_batch steps, its init nanoGPT's), only(Applies::gpt, ...) for nanoGPT's, every model otherwise.

FlagSpec only(Applies a, FlagSpec f) {
  f.applies = a;
  return f;
}

// A flag added after the first goldens (written by to_args only when set), for every model.
FlagSpec later(FlagSpec f) {
  f.omit_default = true;
  return f;
}

}  // namespace

const std::vector<FlagSpec>& flag_table() {
  static const std::vector<FlagSpec> table = [] {
  std::vector<FlagSpec> t = {
      int_flag("world-size", &Config::world_size, 1, kMaxWorldSize,
               "model and data (PyTorch's names; defaults in brackets):\n"
               "  --world-size N            replicas / ranks, 1..64 [{def}]\n"),
      {"model",
       "  --model mlp|cnn|SPEC      mlp: --layers with --activation; cnn: a LeNet-sized net on the digits (its\n"
       "                            default --dataset);\n"
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
      only(Applies::sequential, {"layers", "  --layers 6,4,2            MLP sizes, >= 2 entries [{def}]\n",
       [](const Flags& f, Config& c) {
         c.layers = f.get_int_list("layers", c.layers, 1, 1 << 16);
         if (c.layers.size() < 2) {
           throw UsageError(
               fmt::format("--layers needs at least two sizes, input and output (got {})", c.layers.size()));
         }
       },
       [](const Config& c) { return fmt::format("{}", fmt::join(c.layers, ",")); }}),
      only(Applies::sequential, {"activation", "  --activation {choices}    between layers [{def}]\n",
       [](const Flags& f, Config& c) {
         const auto& names = choice_names().activation;  // none, relu: relu is the bool
         c.relu = index_of(names, f.get_choice("activation", names[c.relu], names), "activation") == 1;
       },
       [](const Config& c) { return choice_names().activation[c.relu]; }, false, &choice_names().activation}),
      only(Applies::sequential, choice_flag("loss", &Config::loss, choice_names().loss,
                  "  --loss {choices}    MSELoss, CrossEntropyLoss (labels = argmax of y), or cross_entropy "
                  "with y as\n"
                  "                            class probabilities (notebook 003's F.cross_entropy on float targets) "
                  "[{def}]\n")),
      choice_flag("optimizer", &Config::optimizer, choice_names().optimizer,
                  "  --optimizer {choices}      [{def}]    "),
      double_flag("lr", &Config::lr, 0.0, 1e6, "--lr LR [{def}]    "),
      only(Applies::sequential, double_flag("momentum", &Config::momentum, 0.0, 1.0, "--momentum M (sgd) [{def}]\n")),
      choice_flag("dataset", &Config::dataset, choice_names().dataset,
                  "  --dataset {choices} random: notebook 000's RandomTensorDataset (randn); toy: "
                  "notebook 001's 5 points;\n"
                  "                            rand: notebook 003's MyTrainDataset (rand(in), rand(out) per sample);\n"
                  "                            digits: scikit-learn's 1797 8x8 digits, 1500 to train, 297 to test "
                  "[{def}]\n"),
      {"data", "  --data FILE               --dataset digits: a copy of scikit-learn's digits.csv.gz [$DDPLAB_DIGITS,\n"
       "                            else Debian's python3-sklearn copy]\n",
       [](const Flags& f, Config& c) { c.data = f.get_string("data", c.data); }, [](const Config& c) { return c.data; },
       true},
      only(Applies::sequential, int_flag("samples", &Config::samples, 1, 1 << 22,
               "  --samples N               random dataset size [{def}]       ")),
      int_flag("seed", &Config::seed, 0, INT64_MAX, "--seed S   manual_seed for data and model [{def}]\n"),
      only(Applies::sequential,
           bool_flag("shuffle", &Config::shuffle, "  --shuffle true|false      DistributedSampler shuffle [{def}]   ")),
      only(Applies::sequential,
           int_flag("sampler-seed", &Config::sampler_seed, 0, INT64_MAX, "--sampler-seed S [{def}]\n")),
      only(Applies::sequential, bool_flag("drop-last", &Config::drop_last,
                                          "  --drop-last true|false    DistributedSampler drop_last [{def}]\n")),
      only(Applies::sequential, bool_flag("loader-drop-last", &Config::loader_drop_last,
                "  --loader-drop-last true|false  DataLoader drop_last [{def}]\n")),
      only(Applies::sequential, bool_flag("set-epoch", &Config::set_epoch,
                "  --set-epoch true|false    call sampler.set_epoch(epoch) each epoch [{def}]\n")),
      int_flag("batch-size", &Config::batch_size, 1, 1 << 22, "  --batch-size B            per rank [{def}]        "),
      only(Applies::sequential, int_flag("epochs", &Config::epochs, 1, 100000, "--epochs E [{def}]\n")),
      only(Applies::sequential, choice_flag("init", &Config::init, choice_names().init,
                  "DDP:\n"
                  "  --init {choices}  seed the model with --seed, with seed + rank, or not at all: "
                  "continue\n"
                  "                            the data's random stream, as notebook 003 does [{def}]\n")),
      bool_flag("broadcast", &Config::broadcast,
                "  --broadcast true|false    broadcast rank 0's parameters at construction, as DDP does [{def}]\n"),
      {"broadcast-buffers",
       "  --broadcast-buffers true|false  broadcast rank 0's buffers (BatchNorm's running stats) before every\n"
       "                            training forward, as DDP's broadcast_buffers does [{def}]\n",
       [](const Flags& f, Config& c) { c.broadcast_buffers = f.get_bool("broadcast-buffers", c.broadcast_buffers); },
       [](const Config& c) { return std::string(c.broadcast_buffers ? "true" : "false"); }, true},
      only(Applies::sequential,
           bool_flag("sync-batchnorm", &Config::sync_batchnorm,
                     "  --sync-batchnorm true|false  nn.SyncBatchNorm.convert_sync_batchnorm(model): every BatchNorm\n"
                     "                            normalises with the statistics of all ranks' samples [{def}]\n")),
      {"seed-per-rank",
       "  --seed-per-rank true|false  after DDP(model) each rank calls manual_seed(seed + rank): its Dropout masks\n"
       "                            (and loader draws) differ from the other ranks'; --model gpt: nanoGPT's\n"
       "                            seed_offset, rank r seeds seed + r before the model ([true] for gpt) [{def}]\n",
       [](const Flags& f, Config& c) { c.seed_per_rank = f.get_bool("seed-per-rank", c.seed_per_rank); },
       [](const Config& c) { return std::string(c.seed_per_rank ? "true" : "false"); }, true},
      choice_flag("average", &Config::average, choice_names().average,
                  "  --average {choices}\n"
                  "                            grad*(1/ws) then SUM (PyTorch) | SUM then /ws (notebook) | ncclAvg |\n"
                  "                            SUM then *(1/ws) | grad/ws then SUM (the last two: by hand) [{def}]\n"),
      later(only(Applies::sequential, choice_flag("hand-sync", &Config::hand_sync, choice_names().hand_sync,
                  "  --hand-sync {choices}\n"
                  "                            the gradients averaged by the script itself, no DDP: an all-reduce per\n"
                  "                            parameter (PyTorch's tutorial), one flat buffer, or buckets of at most\n"
                  "                            --bucket-cap-mb in reverse order; --average says how; the run is then\n"
                  "                            compared with DDP(model)'s [{def}]\n"))),
      double_flag("bucket-cap-mb", &Config::bucket_cap_mb, 1e-6, 1e6,
                  "  --bucket-cap-mb MB        bucket size cap; the first rebuilt bucket is 1 MiB (torch 1.13) [{def}]\n"),
      int_flag("no-sync", &Config::no_sync, 1, 1 << 20,
               "  --no-sync K               all-reduce every K micro-batches (no_sync in between) [{def}]\n"),
      later(choice_flag("no-sync-loss", &Config::no_sync_loss, choice_names().no_sync_loss,
                        "  --no-sync-loss {choices}  under --no-sync K: loss.backward() on each micro-batch (the K\n"
                        "                            gradients add up) or (loss / K).backward() (their mean; --model "
                        "gpt's) [{def}]\n")),
      later(only(Applies::sequential, choice_flag("sync-on", &Config::sync_on, choice_names().sync_on,
                        "  --sync-on {choices}     which of a step's K micro-batches runs outside no_sync(): the\n"
                        "                            last (correct), the first (a misuse: the all-reduce averages only "
                        "its\n"
                        "                            .grad, the rest stay each rank's own) or none; replicas diverge "
                        "[{def}]\n"))),
      later(only(Applies::sequential,
                 int_flag("loss-divisor", &Config::loss_divisor, 1, 1 << 20,
                          "  --loss-divisor D          loss / D before backward() (D = world size: the gradients "
                          "come out\n"
                          "                            1/D of DDP's, which already averages) [{def}]\n"))),
      later(only(Applies::sequential,
                 {"inject-nan",
                  "  --inject-nan RANK:STEP    a NaN in rank RANK's batch at optimizer step STEP (its first input value):\n"
                  "                            how one rank's NaN reaches every rank; the run then exits 4 [none]\n",
                  [](const Flags& f, Config& c) {
                    if (!f.has("inject-nan")) return;
                    const std::string v = f.get_string("inject-nan", "");
                    if (v == "none") return;
                    const size_t colon = v.find(':');
                    const auto number = [&](const std::string& s) -> int64_t {
                      if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
                        throw UsageError("--inject-nan takes RANK:STEP, two numbers from 0 (got '" + v + "')");
                      return std::stoll(s);
                    };
                    if (colon == std::string::npos)
                      throw UsageError("--inject-nan takes RANK:STEP, two numbers from 0 (got '" + v + "')");
                    c.inject_nan_rank = number(v.substr(0, colon));
                    c.inject_nan_step = number(v.substr(colon + 1));
                  },
                  [](const Config& c) {
                    return c.inject_nan_rank < 0 ? std::string("none")
                                                 : fmt::format("{}:{}", c.inject_nan_rank, c.inject_nan_step);
                  }})),
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
      only(Applies::sequential, choice_flag("kernels", &Config::kernels, kernels_names(),
                  "  --kernels {choices}  Linear on OpenBLAS with PyTorch's calls, or on fixed-order loops that "
                  "a GPU\n"
                  "                            (ddp_verify --backend nccl) reproduces bit for bit [{def}]\n")),
      {"zero",
       "  --zero true|false         the optimizer as torch's ZeroRedundancyOptimizer: each rank keeps state for and\n"
       "                            steps its shard of the parameters, then broadcasts it (same bits as plain) "
       "[{def}]\n",
       [](const Flags& f, Config& c) { c.zero = f.get_bool("zero", c.zero); },
       [](const Config& c) { return std::string(c.zero ? "true" : "false"); }, true},
      // Issue 18's Join: added after the goldens, so left out of to_args at their defaults.
      {"uneven",
       "uneven inputs (torch.distributed.algorithms.Join):\n"
       "  --uneven K                rank r trains on the first B - K*r of its B batches per epoch (--model gpt:\n"
       "                            runs K*r fewer optimizer steps) [{def}]\n",
       [](const Flags& f, Config& c) { c.uneven = f.get_int("uneven", c.uneven, 0, 1 << 22); },
       [](const Config& c) { return std::to_string(c.uneven); }, true},
      {"join",
       "  --join true|false         inside Join([ddp]) (Join([ddp, zero]) with --zero): ranks out of batches shadow the\n"
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
      later({"join-scope",
             "  --join-scope {choices}  one Join per epoch, or one around all epochs (PyTorch's Join tutorial): a\n"
             "                            rank out of batches goes on into the next epoch [{def}]\n",
             [](const Flags& f, Config& c) {
               const auto& names = choice_names().join_scope;
               c.join_scope = static_cast<JoinScope>(index_of(
                   names, f.get_choice("join-scope", names[static_cast<size_t>(c.join_scope)], names), "join-scope"));
             },
             [](const Config& c) { return choice_names().join_scope[static_cast<size_t>(c.join_scope)]; }, false,
             &choice_names().join_scope}),
      later(bool_flag("find-unused-parameters", &Config::find_unused_parameters,
                      "DDP's constructor and the training step (every model):\n"
                      "  --find-unused-parameters true|false [{def}]   --static-graph true|false [false]\n")),
      later(bool_flag("static-graph", &Config::static_graph, "")),
      later(bool_flag("gradient-as-bucket-view", &Config::gradient_as_bucket_view,
                      "  --gradient-as-bucket-view true|false [{def}]  ")),
      later({"zero-grad", "--zero-grad none|zeros: zero_grad(set_to_none=True|False) [none]\n",
             [](const Flags& f, Config& c) {
               const auto& names = choice_names().zero_grad;
               c.zero_grad_set_to_none =
                   index_of(names, f.get_choice("zero-grad", names[c.zero_grad_set_to_none], names), "zero-grad") == 1;
             },
             [](const Config& c) { return choice_names().zero_grad[c.zero_grad_set_to_none]; }, false,
             &choice_names().zero_grad}),
      later(double_flag("clip-grad-norm", &Config::clip_grad_norm, 0.0, 1e9,
                        "  --clip-grad-norm X        clip_grad_norm_ after the all-reduce; 0: off [{def}]\n")),
      // --model gpt: nanoGPT's GPTConfig and train.py.
      only(Applies::gpt,
           {"n-layer",
            "--model gpt (a tiny GPT: karpathy/nanoGPT's model.py and train.py; its defaults: --batch-size 4\n"
            "  --seed 1337 --seed-per-rank true --no-sync-loss divide --lr 0.001 --optimizer adamw --dataset text\n"
            "  --data /usr/share/common-licenses/GPL-3):\n"
            "  --n-layer L [2]  ",
            [](const Flags& f, Config& c) { c.gpt.n_layer = f.get_int("n-layer", c.gpt.n_layer, 1, 48); },
            [](const Config& c) { return std::to_string(c.gpt.n_layer); }}),
      only(Applies::gpt, {"n-head", "--n-head H [2]  ",
                          [](const Flags& f, Config& c) { c.gpt.n_head = f.get_int("n-head", c.gpt.n_head, 1, 64); },
                          [](const Config& c) { return std::to_string(c.gpt.n_head); }}),
      only(Applies::gpt, {"n-embd", "--n-embd C [32] (a multiple of H)  ",
                          [](const Flags& f, Config& c) { c.gpt.n_embd = f.get_int("n-embd", c.gpt.n_embd, 1, 2048); },
                          [](const Config& c) { return std::to_string(c.gpt.n_embd); }}),
      only(Applies::gpt,
           {"block-size", "--block-size T [16]\n",
            [](const Flags& f, Config& c) { c.gpt.block_size = f.get_int("block-size", c.gpt.block_size, 1, 1024); },
            [](const Config& c) { return std::to_string(c.gpt.block_size); }}),
      only(Applies::gpt, {"dropout", "  --dropout P [0]  ",
                          [](const Flags& f, Config& c) {
                            c.gpt.dropout = f.get_double("dropout", c.gpt.dropout, 0.0, 1.0);
                            // nn.Dropout(1.0) zeroes everything: nothing would train (and the oracle refuses it)
                            if (c.gpt.dropout == 1.0) throw UsageError("--dropout must be in [0, 1) (got 1)");
                          },
                          [](const Config& c) { return fmt::format("{}", c.gpt.dropout); }}),
      only(Applies::gpt, {"bias", "--bias true|false [true]  ",
                          [](const Flags& f, Config& c) { c.gpt.bias = f.get_bool("bias", c.gpt.bias); },
                          [](const Config& c) { return std::string(c.gpt.bias ? "true" : "false"); }}),
      only(Applies::gpt, {"gelu", "--gelu {choices} [none]\n",
                          [](const Flags& f, Config& c) {
                            const auto& n = choice_names().gelu;
                            c.gpt.gelu = static_cast<nn::GeluApproximate>(
                                index_of(n, f.get_choice("gelu", n[static_cast<size_t>(c.gpt.gelu)], n), "gelu"));
                          },
                          [](const Config& c) { return choice_names().gelu[static_cast<size_t>(c.gpt.gelu)]; }, false,
                          &choice_names().gelu}),
      only(Applies::gpt,
           {"aux-head-every", "  --aux-head-every K [0: none]  an aux_head Linear used only on steps with step % K == 0\n",
            [](const Flags& f, Config& c) {
              c.gpt.aux_head_every = f.get_int("aux-head-every", c.gpt.aux_head_every, 0, 1000000);
            },
            [](const Config& c) { return std::to_string(c.gpt.aux_head_every); }}),
      only(Applies::gpt, int_flag("steps", &Config::steps, 0, 1000000,
                                  "  --steps N [{def}] optimizer steps, each of --no-sync K micro-batches (get_batch from "
                                  "each rank's\n                            generator; --no-sync-loss: loss / K)\n")),
      only(Applies::gpt, int_flag("eval-every", &Config::eval_every, 0, 1000000,
                                  "  --eval-every N [0: never]  ")),
      only(Applies::gpt, int_flag("eval-iters", &Config::eval_iters, 1, 10000,
                                  "--eval-iters M [{def}]   (estimate_loss: train and val, every rank)\n")),
      only(Applies::gpt, double_flag("weight-decay", &Config::weight_decay, 0.0, 10.0,
                                     "  --weight-decay X [{def}]  ")),
      only(Applies::gpt,
           {"betas", "--betas B1,B2 [0.9,0.95]  (AdamW, eps 1e-8; decay on 2-d parameters only)\n",
            [](const Flags& f, Config& c) {
              const std::string betas = f.get_string("betas", "0.9,0.95");
              std::istringstream in(betas);
              char comma = 0;
              double b1 = -1, b2 = -1;
              if (!(in >> b1 >> comma >> b2) || comma != ',' || !in.eof() || !(b1 >= 0 && b1 < 1) ||
                  !(b2 >= 0 && b2 < 1)) {
                throw UsageError("--betas must be two numbers in [0, 1) as B1,B2 (got '" + betas + "')");
              }
              c.beta1 = b1;
              c.beta2 = b2;
            },
            [](const Config& c) { return fmt::format("{},{}", c.beta1, c.beta2); }}),
  };
  return t;
  }();
  return table;
}

const std::vector<std::string>& gpt_args_order() {
  static const std::vector<std::string> order = {
      "model", "n-layer", "n-head", "n-embd", "block-size", "dropout", "bias", "gelu", "aux-head-every", "data",
      "batch-size", "world-size", "seed", "seed-per-rank", "steps", "no-sync", "eval-every", "eval-iters", "lr",
      "weight-decay", "betas", "clip-grad-norm", "find-unused-parameters", "static-graph", "gradient-as-bucket-view",
      "zero-grad", "bucket-cap-mb"};
  return order;
}

}  // namespace ddplab::ddp

