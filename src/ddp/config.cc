#include "src/ddp/config.h"

#include <fmt/format.h>

#include "src/limits.h"

namespace ddplab::ddp {

int64_t Config::num_samples_per_rank() const {
  const int64_t n = dataset_size();
  if (drop_last && n % world_size != 0) return (n - world_size + world_size - 1) / world_size;
  return (n + world_size - 1) / world_size;
}

std::set<std::string> config_flag_names() {
  return {"world-size", "layers",   "activation",   "loss",       "optimizer",        "lr",
          "momentum",   "dataset",  "samples",      "seed",       "shuffle",          "sampler-seed",
          "drop-last",  "loader-drop-last", "set-epoch", "batch-size", "epochs",   "init",
          "broadcast",  "average",  "bucket-cap-mb", "no-sync",   "allreduce",  "kernels"};
}

const char* config_usage() {
  return R"(model and data (PyTorch's names; defaults in brackets):
  --world-size N            replicas / ranks, 1..64 [2]
  --layers 6,4,2            MLP sizes, >= 2 entries [6,4,2]
  --activation none|relu    between layers [none]
  --loss mse|ce|ce-probs    MSELoss, CrossEntropyLoss (labels = argmax of y), or cross_entropy with y as
                            class probabilities (notebook 003's F.cross_entropy on float targets) [mse]
  --optimizer sgd|adam      [sgd]    --lr LR [0.01]    --momentum M (sgd) [0]
  --dataset random|toy|rand random: notebook 000's RandomTensorDataset (randn); toy: notebook 001's 5 points;
                            rand: notebook 003's MyTrainDataset (rand(in), rand(out) per sample) [random]
  --samples N               random dataset size [64]       --seed S   manual_seed for data and model [12345]
  --shuffle true|false      DistributedSampler shuffle [true]   --sampler-seed S [0]
  --drop-last true|false    DistributedSampler drop_last [false]
  --loader-drop-last true|false  DataLoader drop_last [false]
  --set-epoch true|false    call sampler.set_epoch(epoch) each epoch [true]
  --batch-size B            per rank [8]        --epochs E [1]
DDP:
  --init same|per-rank|continue  seed the model with --seed, with seed + rank, or not at all: continue
                            the data's random stream, as notebook 003 does [same]
  --broadcast true|false    broadcast rank 0's parameters at construction, as DDP does [true]
  --average predivide|postdivide|avg   grad*(1/ws) then SUM (PyTorch) | SUM then /ws (notebook) | ncclAvg [predivide]
  --bucket-cap-mb MB        bucket size cap; the first bucket is 1 MiB [25]
  --no-sync K               all-reduce every K micro-batches (no_sync in between) [1]
  --allreduce naive|ring|halving-doubling|tree|nccl-ring   the simulator's algorithm; ring matches Gloo,
                            nccl-ring matches NCCL pinned by ddp_verify --nccl-exact [ring]
  --kernels fast|reference  Linear on OpenBLAS with PyTorch's calls, or on fixed-order loops that a GPU
                            (ddp_verify --backend nccl) reproduces bit for bit [fast]
)";
}

Config config_from_flags(const Flags& f) {
  Config c;
  c.world_size = f.get_int("world-size", c.world_size, 1, kMaxWorldSize);
  c.layers = f.get_int_list("layers", c.layers, 1, 1 << 16);
  if (c.layers.size() < 2) {
    throw UsageError(fmt::format("--layers needs at least two sizes, input and output (got {})", c.layers.size()));
  }
  c.relu = f.get_choice("activation", "none", {"none", "relu"}) == "relu";
  c.loss = f.get_choice("loss", c.loss, {"mse", "ce", "ce-probs"});
  c.optimizer = f.get_choice("optimizer", c.optimizer, {"sgd", "adam"});
  c.lr = f.get_double("lr", c.lr, 0.0, 1e6);
  c.momentum = f.get_double("momentum", c.momentum, 0.0, 1.0);
  c.dataset = f.get_choice("dataset", c.dataset, {"random", "toy", "rand"});
  c.samples = f.get_int("samples", c.samples, 1, 1 << 22);
  c.seed = static_cast<uint64_t>(f.get_int("seed", static_cast<int64_t>(c.seed), 0, INT64_MAX));
  c.shuffle = f.get_bool("shuffle", c.shuffle);
  c.sampler_seed = static_cast<uint64_t>(f.get_int("sampler-seed", 0, 0, INT64_MAX));
  c.drop_last = f.get_bool("drop-last", c.drop_last);
  c.loader_drop_last = f.get_bool("loader-drop-last", c.loader_drop_last);
  c.set_epoch = f.get_bool("set-epoch", c.set_epoch);
  c.batch_size = f.get_int("batch-size", c.batch_size, 1, 1 << 22);
  c.epochs = f.get_int("epochs", c.epochs, 1, 100000);
  c.init = f.get_choice("init", c.init, {"same", "per-rank", "continue"});
  c.broadcast = f.get_bool("broadcast", c.broadcast);
  c.average = parse_average(f.get_choice("average", "predivide", {"predivide", "postdivide", "avg"}));
  c.bucket_cap_mb = f.get_double("bucket-cap-mb", c.bucket_cap_mb, 1e-6, 1e6);
  c.no_sync = f.get_int("no-sync", c.no_sync, 1, 1 << 20);
  c.allreduce = collective::parse_algorithm(f.get_choice("allreduce", "ring", collective::algorithm_names()));
  c.kernels = parse_kernels(f.get_choice("kernels", "fast", {"fast", "reference"}));
  validate(c);
  return c;
}

void validate(const Config& c) {
  if (c.dataset == "toy" && (c.layers.front() != 2 || c.layers.back() != 2)) {
    throw UsageError(fmt::format("--dataset toy has 2 features and 2 classes: --layers must start and end with 2 "
                                 "(got {})", fmt::join(c.layers, ",")));
  }
  if (c.dataset_size() < c.world_size) {
    throw UsageError(fmt::format("--world-size {} exceeds the dataset size {}: every rank needs a sample",
                                 c.world_size, c.dataset_size()));
  }
  const int64_t shard = c.num_samples_per_rank();
  if (c.batch_size > shard) {
    throw UsageError(fmt::format("--batch-size {} is larger than a rank's shard of {} samples "
                                 "(dataset {} / world size {})",
                                 c.batch_size, shard, c.dataset_size(), c.world_size));
  }
  check_footprint(footprint(c), "--layers, --world-size, --samples, --batch-size");
}

Footprint footprint(const Config& c) {
  Footprint f;
  int64_t widths = 0;
  for (size_t i = 0; i < c.layers.size(); ++i) {
    widths += c.layers[i];
    if (i + 1 < c.layers.size()) f.parameters += c.layers[i] * c.layers[i + 1] + c.layers[i + 1];
  }
  f.replicas = c.world_size;  // the simulator holds them all; ddp_verify's rank 0 runs the simulator
  f.copies = 3 + (c.momentum > 0 ? 1 : 0) + (c.optimizer == "adam" ? 2 : 0);
  f.data = c.dataset_size() * (c.layers.front() + c.layers.back());
  f.activations = 2 * c.batch_size * widths;  // outputs and their gradients
  return f;
}

std::vector<std::string> to_args(const Config& c) {
  const auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  const char* avg[] = {"predivide", "postdivide", "avg"};
  return {"--world-size",   std::to_string(c.world_size),
          "--layers",       fmt::format("{}", fmt::join(c.layers, ",")),
          "--activation",   c.relu ? "relu" : "none",
          "--loss",         c.loss,
          "--optimizer",    c.optimizer,
          "--lr",           fmt::format("{}", c.lr),
          "--momentum",     fmt::format("{}", c.momentum),
          "--dataset",      c.dataset,
          "--samples",      std::to_string(c.samples),
          "--seed",         std::to_string(c.seed),
          "--shuffle",      b(c.shuffle),
          "--sampler-seed", std::to_string(c.sampler_seed),
          "--drop-last",    b(c.drop_last),
          "--loader-drop-last", b(c.loader_drop_last),
          "--set-epoch",    b(c.set_epoch),
          "--batch-size",   std::to_string(c.batch_size),
          "--epochs",       std::to_string(c.epochs),
          "--init",         c.init,
          "--broadcast",    b(c.broadcast),
          "--average",      avg[static_cast<int>(c.average)],
          "--bucket-cap-mb", fmt::format("{}", c.bucket_cap_mb),
          "--no-sync",      std::to_string(c.no_sync),
          "--allreduce",    collective::algorithm_name(c.allreduce),
          "--kernels",      kernels_name(c.kernels)};
}

std::string describe(const Config& c) {
  const char* avg[] = {"predivide", "postdivide", "avg"};
  std::string opt = c.optimizer == "sgd" ? fmt::format("sgd lr={} momentum={}", c.lr, c.momentum)
                                         : fmt::format("adam lr={}", c.lr);
  return fmt::format(
      "world_size={} | MLP {}{} | {} | {} | {} dataset, {} samples | batch {}/rank | shuffle={} drop_last={} | "
      "init={} broadcast={} | average={} | bucket_cap_mb={} | no_sync={} | allreduce={} | kernels={}",
      c.world_size, fmt::join(c.layers, "-"), c.relu ? " relu" : "", c.loss, opt, c.dataset, c.dataset_size(),
      c.batch_size, c.shuffle, c.drop_last, c.init, c.broadcast, avg[static_cast<int>(c.average)],
      c.bucket_cap_mb, c.no_sync, collective::algorithm_name(c.allreduce), kernels_name(c.kernels));
}

}  // namespace ddplab::ddp
