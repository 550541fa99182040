// bazel run //notebooks_ported/002_checkpoint -- seed notebook 002: the SimpleLinearModel (10 -> 10)
// DDP demo with checkpointing: rank 0 saves, barrier, every rank loads and compares with its own
// parameters, then one training step. --skew-rank/--skew-seconds shows what a slow rank does to the others.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/lab_report.h"
#include "notebooks_ported/lab/seeding.h"
#include "src/comm/local_group.h"
#include "src/base/compare.h"
#include "src/ddp/bucket_sync.h"
#include "src/base/io.h"
#include "src/launch/runner.h"
#include "src/train/loss.h"
#include "src/train/optim.h"
#include "src/base/safetensors.h"

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: 002_checkpoint [flags]
Seed notebook 002 in C++ (demo_training_with_checkpoint), 2 ranks by default.
  --checkpoint FILE         where rank 0 saves (safetensors) [a file in $TMPDIR named after the run]
  --skew-rank R --skew-seconds S   rank R sleeps S seconds before the barrier
  --load FILE               only read a safetensors file and list its tensors: ddplab's checkpoints (their
                            checksum verified) or any standard file of F32 tensors (read unverified);
                            a corrupt or malformed file is refused with one line and status 2
                            (with --dump OUT: the tensors as JSON, {"name": {"shape", "values"}})
)";

constexpr const char* kSeedingLesson = R"(
What this shows: the notebook never calls torch.manual_seed, so each rank (a fresh process) started from
its own seed: each built its own SimpleLinearModel and drew its own batch (exact: False above), and the
losses above differ. The checkpoint still matched every rank's parameters, and the weights still agree after
the step (exact: True): DDP(model) broadcasts rank 0's parameters to every rank when it is constructed
(that is why saving on rank 0 alone is enough), and the step averages the gradients over the ranks, so
every rank applies the same update. Only the data is each rank's own.)";

std::vector<float> flat(const MLP& model) {
  std::vector<float> v;
  for (const Parameter* p : model.parameters()) v.insert(v.end(), p->data(), p->data() + p->numel());
  return v;
}

// --load's --dump: {"name": {"shape": [...], "values": [...]}, ...}, every float exact (9 digits, -0.0 kept).
std::string tensors_json(const safetensors::TensorMap& tensors) {
  std::string out = "{";
  for (const auto& [name, t] : tensors) {
    std::string values;
    for (float v : t.data) {
      values += (values.empty() ? "" : ", ") + (v == 0 && std::signbit(v) ? std::string("-0.0") : json_float(v));
    }
    out += fmt::format("{}{}: {{\"shape\": [{}], \"values\": [{}]}}", out.size() > 1 ? ", " : "",
                       nlohmann::json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                       fmt::join(t.shape, ", "), values);
  }
  return out + "}\n";
}

// Removes a checkpoint the lab named itself when rank 0 leaves, also by an exception (a skewed rank that
// outlasts the timeout): nothing is left in $TMPDIR.
struct RemoveOnExit {
  std::string path;
  ~RemoveOnExit() {
    if (!path.empty()) unlink(path.c_str());
  }
};

int rank_body(const Flags& flags, comm::Communicator& comm, const std::string& checkpoint) {
  const int rank = comm.rank(), ws = comm.world_size();
  const RemoveOnExit ours{rank == 0 && !flags.has("checkpoint") ? checkpoint : ""};
  lab::print_line(fmt::format("Running training with checkpoint example on rank {}.", rank));
  // The notebook seeds nothing: each of its ranks starts from its own seed (--notebook-seeding). The lab
  // fixes kDefaultSeed on every rank unless asked, and says so. SimpleLinearModel draws Linear(10, 10).
  const bool notebook_seeding = flags.get_bool("notebook-seeding", false);
  const uint64_t seed = notebook_seeding ? lab::fresh_process_seed() : kDefaultSeed;
  if (notebook_seeding) {
    lab::print_line(lab::rank_seed_line(rank, seed));
  } else if (rank == 0) {
    lab::print_line(lab::fixed_seed_note("SimpleLinearModel and batch"));
  }
  Generator gen(seed);
  MLP model({10, 10}, false, {"net"}, gen);
  const std::vector<float> before = flat(model);
  for (Parameter* p : model.parameters()) comm.broadcast(p->data(), static_cast<size_t>(p->numel()), 0);  // DDP()

  // ddp_model.state_dict() names every tensor "module.<name>".
  if (rank == 0) {
    safetensors::TensorMap sd;
    for (const Parameter* p : model.parameters())
      sd["module." + p->name] = {p->shape, {p->data(), p->data() + p->numel()}};
    if (std::string why = safetensors::save(checkpoint, sd); !why.empty()) throw UsageError("--checkpoint: " + why);
    lab::print_line(fmt::format("[rank0] saved {} tensors to {}", sd.size(), checkpoint));
  }
  const int64_t skew_rank = flags.get_int("skew-rank", -1, -1, 63);
  const double skew = flags.get_double("skew-seconds", 0, 0, 3600);
  if (rank == skew_rank && skew > 0) {
    lab::print_line(fmt::format("[rank{}] sleeping {} s before the barrier (skewed rank)", rank, skew));
    // On the simulator the ranks are threads of one process, which ends only when every one has: the peers
    // give up on the barrier at --timeout, so sleeping longer would only keep the process waiting.
    const double limit = comm.backend() == "local" ? static_cast<double>(comm.timeout.count()) / 1000 + 0.1 : skew;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(skew, limit)));
  }
  comm.barrier();  // nobody loads before rank 0 has saved

  const safetensors::TensorMap loaded = safetensors::load(checkpoint);
  std::vector<CmpResult> rows;
  std::string table;
  for (Parameter* p : model.parameters()) {
    const auto it = loaded.find("module." + p->name);
    if (it == loaded.end() || static_cast<int64_t>(it->second.data.size()) != p->numel()) {
      throw safetensors::FormatError(checkpoint + ": no tensor module." + p->name + " of the right size");
    }
    rows.push_back(cmp("module." + p->name, it->second.data.data(), p->data(), p->numel()));
    table += format_cmp(rows.back()) + "\n";
    std::copy(it->second.data.begin(), it->second.data.end(), p->data());  // load_state_dict
  }
  const std::string title = fmt::format("[rank{}] checkpoint vs own parameters", rank);
  lab::record_table(title, rows);
  lab::print_line(fmt::format("{}:\n{}", title, table.substr(0, table.size() - 1)));

  // One DDP step on torch.randn(20, 10) inputs and labels (the same on every rank only when seeded alike).
  Matrix x(20, 10), y(20, 10);
  gen.normal_(x.data(), 200);
  gen.normal_(y.data(), 200);
  ddp::Reducer reducer(model.parameters(), ws, 25.0, ddp::Average::predivide);
  SGD opt(model.parameters(), SGDOptions{0.001});
  opt.zero_grad();
  const LossResult l = mse_loss(model.forward(x), y);
  model.backward(l.grad);
  ddp::HostSyncOps ops(model.parameters(), comm);
  ddp::sync_buckets(reducer, ops);
  opt.step();
  // Everyone loaded before this all-reduce could finish: a checkpoint we named ourselves goes with `ours`.
  const Parameter& w = model.linears[0].weight;
  lab::print_line(fmt::format("[rank{}] loss {} | net.weight[0][:3] after the step: {} {} {}", rank,
                              python_float_repr(l.loss), w.data()[0], w.data()[1], w.data()[2]));
  if (notebook_seeding) {  // what differs per rank and what DDP made equal, printed by rank 0
    const std::vector<float> xs = lab::gather_floats(comm, std::vector<float>(x.data(), x.data() + x.size()));
    const std::vector<float> all_before = lab::gather_floats(comm, before),
                             all_after = lab::gather_floats(comm, flat(model));
    if (rank == 0) {
      std::vector<CmpResult> seeded;
      for (int k = 1; k < ws; ++k) {
        seeded.push_back(lab::vs_rank0(fmt::format("rank {} model before DDP()", k), all_before, k, ws));
        seeded.push_back(lab::vs_rank0(fmt::format("rank {} batch x", k), xs, k, ws));
        seeded.push_back(lab::vs_rank0(fmt::format("rank {} after the step", k), all_after, k, ws));
      }
      const std::string t = "every rank vs rank 0, seeded as the notebook (not at all)";
      lab::record_table(t, seeded);
      std::string text = "\n# " + t + "\n";
      for (const CmpResult& r : seeded) text += format_cmp(r) + "\n";
      lab::print_line(text + kSeedingLesson);
    }
  }
  if (flags.has("dump") && rank == 0) {
    const std::string doc = fmt::format("{{\"loss\": {}, \"params\": {}}}\n", json_float(l.loss),
                                        json_params(std::as_const(model).parameters()));
    if (std::string why = write_file_atomic(flags.get_string("dump", ""), doc); !why.empty())
      throw UsageError("--dump: " + why);
  }
  return 0;
}

int run(int argc, char** argv) {
  auto known = lab::lab_flag_names();
  for (const char* f : {"checkpoint", "skew-rank", "skew-seconds", "load", "dump", "notebook-seeding"}) known.insert(f);
  const Flags flags(argc, argv, known, dist::with_runner_bare_flags({"notebook-seeding"}));
  if (flags.help()) {
    std::printf("%s%s%s", kUsage, lab::notebook_seeding_usage("SimpleLinearModel and batch").c_str(),
                lab::lab_usage().c_str());
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  if (flags.has("load")) {
    if (flags.has("report")) throw UsageError("--report: --load only reads a checkpoint; there is no run to report");
    if (flags.has("notebook-seeding"))
      throw UsageError("--notebook-seeding: --load only reads a checkpoint; it draws nothing");
    const std::string path = flags.get_string("load", "");
    const std::string dump = flags.has("dump") ? flags.get_string("dump", "") : "";
    if (!dump.empty()) {
      if (std::string why = check_writable(dump); !why.empty()) throw UsageError("--dump: " + why);
    }
    safetensors::TensorMap tensors;
    safetensors::LoadInfo info;
    try {
      tensors = safetensors::load(path, &info);
    } catch (const safetensors::FormatError& e) {
      std::fprintf(stderr, "002_checkpoint: %s\n", e.what());
      return 2;
    }
    for (const auto& [name, t] : tensors) {  // a name with control characters is shown JSON-escaped: one line each
      const bool plain =
          std::none_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
      lab::print_line(fmt::format("{} {} {} floats", plain ? name : nlohmann::json(name).dump(), torch_size(t.shape),
                                  t.data.size()));
    }
    lab::print_line(info.checksum_verified
                        ? "checksum_fnv1a64 verified"
                        : "no checksum_fnv1a64 in __metadata__ (not written by ddplab): the data is read unverified");
    if (!dump.empty()) {
      if (std::string why = write_file_atomic(dump, tensors_json(tensors)); !why.empty())
        throw UsageError("--dump: " + why);
    }
    return 0;
  }
  for (const char* f : {"checkpoint", "dump"}) {
    if (flags.has(f)) {
      if (std::string why = check_writable(flags.get_string(f, "")); !why.empty())
        throw UsageError(fmt::format("--{}: {}", f, why));
    }
  }
  const char* tmp = std::getenv("TMPDIR");
  const char* run_id = std::getenv("DDPLAB_RUN_ID");
  const std::string checkpoint =
      flags.get_string("checkpoint", fmt::format("{}/model.checkpoint.{}.safetensors", tmp && *tmp ? tmp : "/tmp",
                                                 run_id ? std::string(run_id) : std::to_string(getpid())));
  // The skewed rank must exist: refused here, once, before any rank starts.
  const dist::RunFlags run = lab::lab_run_flags(flags);
  const int64_t world_size = !run.real()                 ? (run.world_size != 0 ? run.world_size : 2)
                             : run.nproc != 0            ? run.nproc
                             : std::getenv("WORLD_SIZE") ? std::atoi(std::getenv("WORLD_SIZE"))
                                                         : ddp::kMaxWorldSize;
  if (const int64_t skew_rank = flags.get_int("skew-rank", -1, -1, ddp::kMaxWorldSize - 1); skew_rank >= world_size) {
    throw UsageError(fmt::format("--skew-rank {} is not a rank of this run (world size {})", skew_rank, world_size));
  }
  return lab::run_on_ranks(
      flags, run, argc, argv, "002_checkpoint",
      {"--checkpoint", checkpoint, "--notebook-seeding", flags.get_bool("notebook-seeding", false) ? "true" : "false"},
      [&](comm::Communicator& c) { return rank_body(flags, c, checkpoint); });
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("002_checkpoint", argc, argv, run); }
