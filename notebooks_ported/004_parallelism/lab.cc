// bazel run //notebooks_ported/004_parallelism -- seed notebook 004: DataParallel, DDP's basic example,
// the Lightning example as a DDP configuration, model parallelism, tensor parallelism and ZeRO, each next
// to the single-device computation it replaces, in the notebook's cmp format.
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "notebooks_ported/004_parallelism/lightning_real.h"
#include "notebooks_ported/004_parallelism/parallel.h"
#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/seeding.h"
#include "src/comm/local_group.h"
#include "src/ddp/bucket_sync.h"
#include "src/base/io.h"
#include "src/launch/runner.h"
#include "src/train/loss.h"
#include "src/train/optim.h"

namespace ddplab::lab004 {
// Sections end with a newline; print_line adds its own.
inline void print(const std::string& s) {
  lab::print_line(s.empty() || s.back() != '\n' ? s : s.substr(0, s.size() - 1));
}
}  // namespace ddplab::lab004

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: 004_parallelism [flags]
Seed notebook 004 in C++: every section, 2 ranks by default.
  --part all|dp|ddp|lightning|model|tensor|zero   one section [all]
  --notebook-bugs           tensor parallelism as the notebook wrote it: all_reduce(async_op=True), never waited
  --dp-devices N            DataParallel devices [2]
  --dump FILE               tensors of the DataParallel, tensor-parallel and ZeRO sections, and under "ddp"
                            every rank's seed, loss, initial and final parameters of DDP basic (JSON)
)";

std::map<std::string, std::vector<float>> g_dump;  // rank 0's sections' tensors

std::string keep(const lab004::Section& s) {
  g_dump.insert(s.tensors.begin(), s.tensors.end());
  return lab004::render(s);
}

// demo_basic: ToyModel (10-10-ReLU-5), SGD 0.001, one step on randn(20, 10) -> randn(20, 5). The notebook
// seeds nothing: with `notebook_seeding` each rank draws its own seed, model and batch, as its processes do;
// otherwise every rank seeds kDefaultSeed (said in the output). Every rank's parameters go to g_ddp_ranks.
std::string g_ddp_ranks;  // {"world_size", "ranks": [...]} as lab 003's --dump

std::vector<float> flat(const MLP& model) {
  std::vector<float> v;
  for (const Parameter* p : model.parameters()) v.insert(v.end(), p->data(), p->data() + p->numel());
  return v;
}

std::string ddp_basic(comm::Communicator& c, bool notebook_seeding) {
  const int rank = c.rank(), ws = c.world_size();
  const uint64_t seed = notebook_seeding ? lab::fresh_process_seed() : kDefaultSeed;
  Generator g(seed);
  MLP model({10, 10, 5}, true, {"net1", "net2"}, g);
  const std::string initial = json_params(std::as_const(model).parameters());
  const std::vector<float> before = flat(model);
  for (Parameter* p : model.parameters()) c.broadcast(p->data(), static_cast<size_t>(p->numel()), 0);  // DDP()
  Matrix x(20, 10), y(20, 5);
  g.normal_(x.data(), x.size());
  g.normal_(y.data(), y.size());
  ddp::Reducer red(model.parameters(), ws, 25.0, ddp::Average::predivide);
  SGD opt(model.parameters(), SGDOptions{0.001});
  opt.zero_grad();
  const LossResult l = mse_loss(model.forward(x), y);
  model.backward(l.grad);
  ddp::HostSyncOps ops(model.parameters(), c);
  ddp::sync_buckets(red, ops);
  opt.step();
  const std::vector<std::string> ranks = comm::all_gather_strings(
      c, fmt::format("{{\"seed\": {}, \"loss\": {}, \"initial\": {}, \"params\": {}}}", seed, json_float(l.loss),
                     initial, json_params(std::as_const(model).parameters())));
  const std::vector<float> mine = flat(model), all = lab::gather_floats(c, mine);
  const std::vector<float> all_before = lab::gather_floats(c, before);
  const std::vector<float> xs = lab::gather_floats(c, std::vector<float>(x.data(), x.data() + x.size()));
  const std::vector<uint64_t> seeds = lab::gather_seeds(c, seed);
  const size_t n = mine.size();
  if (rank != 0) return "";
  g_ddp_ranks = fmt::format("{{\"world_size\": {}, \"ranks\": [{}]}}", ws, fmt::join(ranks, ",\n"));
  // The notebook's print on every rank, here in rank order in this section (printed from each rank it
  // interleaved with the sections before it).
  std::string out = "\n";
  for (int k = 0; k < ws; ++k) out += fmt::format("Start running basic DDP example on rank {}.\n", k);
  if (notebook_seeding) {
    for (int k = 0; k < ws; ++k) out += lab::rank_seed_line(k, seeds[static_cast<size_t>(k)]) + "\n";
  } else {
    out += lab::fixed_seed_note("ToyModel and batch") + "\n";
  }
  lab004::Section s;
  s.title = fmt::format("DDP basic (ToyModel 10-10-ReLU-5, one step): rank {} vs rank 0", ws - 1);
  if (notebook_seeding) {
    // What differs before DDP and what DDP makes equal, rank by rank.
    for (int k = 1; k < ws; ++k) {
      s.rows.push_back(lab::vs_rank0(fmt::format("rank {} batch x", k), xs, k, ws));
      s.rows.push_back(lab::vs_rank0(fmt::format("rank {} model before DDP()", k), all_before, k, ws));
      s.rows.push_back(lab::vs_rank0(fmt::format("rank {} after the step", k), all, k, ws));
    }
    s.title = "DDP basic (ToyModel 10-10-ReLU-5, one step), seeded as the notebook: every rank vs rank 0";
  } else {
    size_t o = 0;
    const size_t last = n * static_cast<size_t>(ws - 1);
    for (const Parameter* p : model.parameters()) {
      s.rows.push_back(cmp(p->name, all.data() + last + o, all.data() + o, p->numel()));
      o += static_cast<size_t>(p->numel());
    }
  }
  s.note = notebook_seeding
               ? "The notebook seeds nothing, so every rank started from its own seed: each built its own ToyModel\n"
                 "and drew its own batch (exact: False above). The weights still agree after the step (exact: True):\n"
                 "DDP(model) broadcasts rank 0's parameters to every rank when it is constructed, and the step\n"
                 "all-reduces the gradients, so every rank applies the same average update. What DDP does not make\n"
                 "equal is the data: here each rank's batch is its own random draw, as it is in the notebook.\n"
               : "Every rank drew the same \"random\" batch here only because the lab seeds every rank alike (above);\n"
                 "the notebook's ranks draw different ones (--notebook-seeding). The replicas are bitwise equal\n"
                 "either way: DDP broadcasts rank 0's parameters at construction and averages the gradients.\n";
  return out + lab004::render(s);
}

// The Lightning example (Model = Linear(100, 10), MSE, Adam lr 0.02, 1000 random samples, batch 32,
// max_epochs 1, strategy "ddp") is plain DDP with Lightning's DistributedSampler (shuffle off for an
// unshuffled loader): run it as that DDP configuration on these ranks. (lightning_real.h runs the
// notebook's own code.)
std::string lightning(comm::Communicator& c) {
  ddp::Config cfg;
  cfg.world_size = c.world_size();
  cfg.layers = {100, 10};
  cfg.optimizer = ddp::OptimizerKind::adam;
  cfg.lr = 0.02;
  cfg.samples = 1000;
  cfg.batch_size = 32;
  cfg.shuffle = false;
  cfg.epochs = 1;
  ddp::validate(cfg);
  const ddp::RankResult res = ddp::train_rank(cfg, c);
  const float last = res.log.back().loss;
  std::vector<float> losses(static_cast<size_t>(c.world_size()));
  c.all_gather(&last, sizeof last, losses.data());
  if (c.rank() != 0) return "";
  return fmt::format(
      "\n# the Lightning example as DDP: {} optimizer steps per rank; last batch loss per rank: {}\n"
      "the same run in the simulator: bazel run //sim:ddp_sim -- --world-size {} --layers 100,10 --optimizer adam "
      "--lr 0.02 --samples 1000 --batch-size 32 --shuffle false\n",
      res.optimizer_steps, fmt::join(losses, " "), c.world_size());
}

// --part, --dp-devices and --notebook-seeding, read once in run() before any rank starts.
struct Parts {
  std::string part;
  int dp_devices;
  bool notebook_seeding;
};

int body(const Flags& flags, const Parts& parts, comm::Communicator& c) {
  const std::string& part = parts.part;
  const auto want = [&](const char* p) { return part == "all" || part == p; };
  const bool r0 = c.rank() == 0;
  if (want("dp") && r0) lab004::print(keep(lab004::data_parallel(parts.dp_devices)));
  if (want("ddp")) {
    if (std::string s = ddp_basic(c, parts.notebook_seeding); r0) lab004::print(s);
  }
  if (want("lightning")) {
    if (std::string s = lightning(c); r0) lab004::print(s);
    // The notebook's own Lightning code, run for real and checked (about 10 s): with --part lightning.
    if (r0 && part == "lightning") lab004::print(lab004::lightning_real());
    if (r0 && part == "all")
      lab::print_line("(the notebook's own Lightning code, run for real by torch 2.x and checked by ddp_check: --part lightning)");
  }
  if (want("model")) {
    if (c.world_size() < 2) {
      if (r0) lab::print_line("\n# model parallelism needs 2 ranks: skipped");
    } else if (auto s = lab004::model_parallel(c); r0) {
      lab004::print(lab004::render(s));
    }
  }
  if (want("tensor")) {
    const bool race = flags.get_bool("notebook-bugs", false);
    if (auto s = lab004::column_parallel(c, false); r0) lab004::print(keep(s));
    if (race) {
      if (auto s = lab004::column_parallel(c, true); r0) lab004::print(lab004::render(s));
    }
    if (auto s = lab004::row_parallel(c); r0) lab004::print(keep(s));
  }
  if (want("zero")) {
    if (auto s = lab004::zero(c); r0) lab004::print(keep(s));
  }
  if (r0 && flags.has("dump")) {
    std::vector<std::string> items;
    for (const auto& [k, v] : g_dump) {
      std::vector<std::string> f;
      for (float x : v) f.push_back(json_float(x));
      items.push_back(fmt::format("\"{}\": [{}]", k, fmt::join(f, ", ")));
    }
    if (!g_ddp_ranks.empty()) items.push_back("\"ddp\": " + g_ddp_ranks);
    if (std::string why =
            write_file_atomic(flags.get_string("dump", ""), fmt::format("{{{}}}\n", fmt::join(items, ",\n")));
        !why.empty()) {
      throw UsageError("--dump: " + why);
    }
  }
  return 0;
}

int run(int argc, char** argv) {
  auto known = lab::lab_flag_names();
  for (const char* f : {"part", "notebook-bugs", "notebook-seeding", "dp-devices", "dump"}) known.insert(f);
  const Flags flags(argc, argv, known, dist::with_runner_bare_flags({"notebook-bugs", "notebook-seeding"}));
  if (flags.help()) {
    std::printf("%s%s%s", kUsage, lab::notebook_seeding_usage("DDP basic: its own ToyModel and batch").c_str(),
                lab::lab_usage().c_str());
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  const Parts parts = {flags.get_choice("part", "all", {"all", "dp", "ddp", "lightning", "model", "tensor", "zero"}),
                       static_cast<int>(flags.get_int("dp-devices", 2, 1, 64)),
                       flags.get_bool("notebook-seeding", false)};
  if (parts.notebook_seeding && parts.part != "all" && parts.part != "ddp") {
    throw UsageError("--notebook-seeding changes only the DDP basic part: use it with --part ddp or all (got --part " +
                     parts.part + ")");
  }
  if (flags.has("dump")) {
    if (std::string why = check_writable(flags.get_string("dump", "")); !why.empty())
      throw UsageError("--dump: " + why);
  }
  return lab::run_on_ranks(flags, lab::lab_run_flags(flags), argc, argv, "004_parallelism",
                           {"--part", parts.part, "--notebook-seeding", parts.notebook_seeding ? "true" : "false"},
                           [&](comm::Communicator& c) { return body(flags, parts, c); });
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("004_parallelism", argc, argv, run); }
