// bazel run //verify:ddp_verify -- --backend gloo --nproc 4
// The DDP step for real: one OS process per rank over Gloo (CPU) or NCCL (GPUs). Rank 0 gathers every
// rank's parameters, runs the simulator on the same configuration and prints both in the cmp table.
// Exit: 0 all rows approximately equal and ranks bitwise identical; 1 otherwise or a rank failed;
// 2 bad input or rendezvous; 3 backend unavailable.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "sim/ddp_report.h"
#include "src/ddp/config.h"
#include "src/ddp/trainer.h"
#include "src/flags.h"
#include "src/io.h"
#include "verify/gloo_comm.h"
#include "verify/nccl_backend.h"
#include "verify/runner.h"

namespace {

using namespace ddplab;

constexpr const char* kHead = R"(usage: ddp_verify --backend gloo|nccl --nproc N [flags]     (spawns N local ranks)
       RANK=r WORLD_SIZE=N ... ddp_verify --store redis://HOST:PORT [flags]   (torchrun style, any host)
       mpirun -np N ddp_verify --store file:/shared/dir [flags]
Runs the DDP step with one process per rank and compares it with ddp_sim's.
)";
constexpr const char* kTail = R"(output:
  --dump-params FILE        every rank's final parameters, sampler indices, losses (ddp_sim's JSON)
  --quiet                   no per-batch lines
)";

struct Exit {
  int code;
};

std::string fmt_rank_json(const ddp::RankResult& r) {  // this rank's entries of the dump
  const std::string params = json_params(std::as_const(r.replica->model).parameters());
  std::vector<std::string> idx, losses;
  for (const auto& e : r.sampler_indices) idx.push_back(fmt::format("[{}]", fmt::join(e, ", ")));
  for (const auto& l : r.log) losses.push_back(json_float(l.loss));
  return fmt::format("{}\n{}\n[{}]", params, fmt::format("[{}]", fmt::join(idx, ", ")), fmt::join(losses, ", "));
}

// The e-th inner list of "[[..], [..], ...]" (flat integer lists, no nesting below).
std::string nth_list(const std::string& lists, size_t e) {
  size_t pos = 1;
  for (size_t i = 0; i < e; ++i) pos = lists.find(']', pos) + 1;
  const size_t open = lists.find('[', pos), close = lists.find(']', open);
  return lists.substr(open, close - open + 1);
}

int body(const Flags& flags, const ddp::Config& cfg, verify::Rank& rank) {
  const verify::RankEnv& env = rank.env;
  const std::string& backend = rank.backend;
  auto& comm = rank.comm;
  const auto args = ddp::to_args(cfg);
  const bool quiet = flags.get_bool("quiet", false);
  if (env.rank == 0) fmt::print("ddp_verify: {} backend, {} ranks | {}\n", backend, env.world_size, ddp::describe(cfg));
  std::fflush(stdout);
  const ddp::RankResult mine =
      ddp::train_rank(cfg, *comm, backend == "nccl" ? &verify::nccl_kernels(cfg.kernels) : nullptr);
  if (!quiet) {
    std::string lines;
    for (const auto& l : mine.log) lines += ddp::progress_line(l, cfg.epochs) + "\n";
    std::fputs(lines.c_str(), stdout);  // one write: ranks' lines do not cut into each other
    std::fflush(stdout);
  }

  // Rank 0 gathers everyone's parameters (and, for the dump, indices and losses).
  std::vector<float> flat;
  for (const Parameter* p : mine.replica->model.parameters()) flat.insert(flat.end(), p->data(), p->data() + p->numel());
  std::vector<float> everyone(flat.size() * static_cast<size_t>(env.world_size));
  comm->all_gather(flat.data(), flat.size() * sizeof(float), everyone.data());
  const auto dumps = comm::all_gather_strings(*comm, fmt_rank_json(mine));

  float verdict = 0.0f;
  if (env.rank == 0) {
    const ddp::SimResult sim = ddp::simulate(cfg, false);
    bool ok = true;
    std::string report;
    for (int r = 0; r < env.world_size; ++r) {
      const auto ps = sim.replicas[static_cast<size_t>(r)]->model.parameters();
      const float* real = everyone.data() + static_cast<size_t>(r) * flat.size();
      const float* real0 = everyone.data();
      std::vector<CmpResult> sim_rows, rank_rows;
      for (const Parameter* p : ps) {
        sim_rows.push_back(cmp(p->name, p->data(), real, p->numel()));
        rank_rows.push_back(cmp(p->name, real, real0, p->numel()));
        real += p->numel();
        real0 += p->numel();
      }
      for (const auto& row : sim_rows) ok = ok && row.approximate;
      for (const auto& row : rank_rows) ok = ok && row.exact;
      if (r == 0 || r + 1 == env.world_size) {
        report += fmt::format("\n# sim vs real, rank {} (simulator all-reduce: {}{})\n", r, collective::algorithm_name(cfg.allreduce),
                              backend == "nccl" ? "; NCCL picks its own ring/tree order, so only world_size 2 can be "
                                                  "exact, with --kernels reference"
                                                : ", the order of Gloo's ring");
        for (const auto& row : sim_rows) report += format_cmp(row) + "\n";
      }
      if (r > 0 && r + 1 == env.world_size) {
        report += fmt::format("\n# real rank {} vs real rank 0\n", r);
        for (const auto& row : rank_rows) report += format_cmp(row) + "\n";
      }
    }
    report += ok ? fmt::format("\nverified: every rank bitwise identical; the simulator agrees (see exact above)\n")
                 : "\nNOT verified: a row above is not approximately equal, or ranks differ\n";
    fmt::print("{}", report);
    verdict = ok ? 0.0f : 1.0f;
    const std::string dump = flags.get_string("dump-params", "");
    if (!dump.empty()) {
      std::string out = fmt::format("{{\"world_size\": {},\n \"backend\": \"{}\",\n \"args\": [\"{}\"],\n \"replicas\": [\n",
                                    env.world_size, backend, fmt::join(args, "\", \""));
      std::vector<std::string> params, idx, losses;
      for (const std::string& d : dumps) {
        const size_t a = d.find('\n'), b = d.find('\n', a + 1);
        params.push_back("  " + d.substr(0, a));
        idx.push_back(d.substr(a + 1, b - a - 1));
        losses.push_back(d.substr(b + 1));
      }
      // sampler_indices as ddp_sim writes them: [epoch][rank][...]
      std::vector<std::string> by_epoch;
      for (size_t e = 0; e < static_cast<size_t>(cfg.epochs); ++e) {
        std::vector<std::string> ranks;
        for (const std::string& per_rank : idx) ranks.push_back(nth_list(per_rank, e));
        by_epoch.push_back(fmt::format("[{}]", fmt::join(ranks, ", ")));
      }
      out += fmt::format("{}\n ],\n \"sampler_indices\": [{}],\n \"losses\": [{}]}}\n", fmt::join(params, ",\n"),
                         fmt::join(by_epoch, ", "), fmt::join(losses, ", "));
      if (std::string why = write_file_atomic(dump, out); !why.empty()) {
        std::fprintf(stderr, "ddp_verify: --dump-params: %s\n", why.c_str());
        verdict = 1.0f;
      }
    }
  }
  comm->broadcast(&verdict, 1, 0);  // every rank exits with rank 0's verdict
  return verdict == 0.0f ? 0 : 1;
}

int run(int argc, char** argv) {
  auto known = ddp::config_flag_names();
  for (const auto& f : verify::runner_flag_names()) known.insert(f);
  for (const char* f : {"dump-params", "quiet"}) known.insert(f);
  const Flags flags(argc, argv, known, {"quiet"});
  if (flags.help()) {
    std::printf("%s%s%s%s", kHead, ddp::config_usage(), verify::runner_usage(), kTail);
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  ddp::Config cfg = ddp::config_from_flags(flags);
  if (flags.has("dump-params")) {
    if (std::string why = check_writable(flags.get_string("dump-params", "")); !why.empty()) {
      throw UsageError("--dump-params: " + why);
    }
  }
  return verify::run_ranks(
      flags, argc, argv,
      verify::ddp_config_agreement(cfg),
      [&](verify::Rank& rank) { return body(flags, cfg, rank); });
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("ddp_verify", argc, argv, run); }
