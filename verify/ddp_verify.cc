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

#include <fmt/format.h>

#include "sim/ddp_report.h"
#include "src/ddp/config.h"
#include "src/ddp/trainer.h"
#include "src/flags.h"
#include "src/io.h"
#include "verify/fault.h"
#include "verify/gloo_comm.h"
#include "verify/launcher.h"
#include "verify/nccl_backend.h"

namespace {

using namespace ddplab;

constexpr const char* kHead = R"(usage: ddp_verify --backend gloo|nccl --nproc N [flags]     (spawns N local ranks)
       RANK=r WORLD_SIZE=N ... ddp_verify --store redis://HOST:PORT [flags]   (torchrun style, any host)
       mpirun -np N ddp_verify --store file:/shared/dir [flags]
Runs the DDP step with one process per rank and compares it with ddp_sim's.
)";
constexpr const char* kTail = R"(verifier:
  --backend gloo|nccl       [gloo]          --nproc N  local ranks to spawn (= world size)
  --store file:DIR|redis://HOST:PORT  rendezvous; default: a fresh directory (local), or
                            redis://MASTER_ADDR:MASTER_PORT under torchrun
  --run-id ID               keeps runs sharing one Redis apart [ddplab]
  --bind ADDR               address this rank listens on [127.0.0.1]
  --timeout S               seconds any collective may wait before failing [30]
  --dump-params FILE        every rank's final parameters, sampler indices, losses (ddp_sim's JSON)
  --quiet                   no per-batch lines
  --fault exit|hang --fault-rank R --fault-at K   (tests) rank R exits or hangs at its K-th all-reduce
)";

struct Exit {
  int code;
};

std::string fmt_rank_json(const ddp::RankResult& r) {  // this rank's entries of the dump
  std::string params = "{";
  const auto ps = r.replica->model.parameters();
  for (size_t i = 0; i < ps.size(); ++i) params += fmt::format("{}\"{}\": {}", i ? ", " : "", ps[i]->name, json_tensor(*ps[i]));
  std::vector<std::string> idx, losses;
  for (const auto& e : r.sampler_indices) idx.push_back(fmt::format("[{}]", fmt::join(e, ", ")));
  for (const auto& l : r.log) losses.push_back(json_float(l.loss));
  return fmt::format("{}}}\n{}\n[{}]", params, fmt::format("[{}]", fmt::join(idx, ", ")), fmt::join(losses, ", "));
}

// The e-th inner list of "[[..], [..], ...]" (flat integer lists, no nesting below).
std::string nth_list(const std::string& lists, size_t e) {
  size_t pos = 1;
  for (size_t i = 0; i < e; ++i) pos = lists.find(']', pos) + 1;
  const size_t open = lists.find('[', pos), close = lists.find(']', open);
  return lists.substr(open, close - open + 1);
}

int worker(const Flags& flags, ddp::Config cfg, const verify::RankEnv& env) {
  const int nproc = static_cast<int>(flags.get_int("nproc", env.world_size, 1, ddp::kMaxWorldSize));
  if (nproc != env.world_size || (flags.has("world-size") && cfg.world_size != env.world_size)) {
    throw UsageError(fmt::format("{} says WORLD_SIZE={}, but --nproc/--world-size say {}", env.source,
                                 env.world_size, flags.has("world-size") ? cfg.world_size : nproc));
  }
  cfg.world_size = env.world_size;
  ddp::validate(cfg);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(flags.get_double("timeout", 30, 0.1, 86400) * 1000));
  std::string store_text = flags.get_string("store", std::getenv("DDPLAB_STORE") ? std::getenv("DDPLAB_STORE") : "");
  if (store_text.empty() && !env.master_addr.empty() && !env.master_port.empty()) {
    store_text = "redis://" + env.master_addr + ":" + env.master_port;
  }
  if (store_text.empty()) {
    throw UsageError("no rendezvous: give --store file:DIR (one host) or redis://HOST:PORT, or MASTER_ADDR/MASTER_PORT");
  }
  const std::string backend = flags.get_choice("backend", "gloo", {"gloo", "nccl"});
  const std::string run_id = flags.get_string("run-id", std::getenv("DDPLAB_RUN_ID") ? std::getenv("DDPLAB_RUN_ID") : "ddplab");
  auto store = verify::open_store(verify::parse_store(store_text), run_id);
  std::unique_ptr<comm::Communicator> comm;
  if (backend == "nccl") {
    const std::string why = verify::nccl_unavailable_reason(env.local_rank, env.local_world_size);
    if (!why.empty()) {
      std::fprintf(stderr, "ddp_verify: rank %d: %s\n", env.rank, why.c_str());
      return 3;
    }
    comm = verify::connect_nccl(store, env.rank, env.world_size, env.local_rank, timeout);
  } else {
    comm = verify::connect_gloo(store, env.rank, env.world_size, flags.get_string("bind", "127.0.0.1"), timeout);
  }
  if (flags.has("fault")) {
    const int64_t who = flags.get_int("fault-rank", 0, 0, ddp::kMaxWorldSize - 1);
    if (who == env.rank) {
      comm = std::make_unique<verify::FaultyComm>(std::move(comm), flags.get_choice("fault", "exit", {"exit", "hang"}),
                                                  static_cast<int>(flags.get_int("fault-at", 1, 1, 1 << 30)));
    }
  }

  // Ranks started differently would train different things: refuse, naming the first differing flag.
  const auto args = ddp::to_args(cfg);
  const auto all = comm::all_gather_strings(*comm, fmt::format("{}", fmt::join(args, "\x1f")));
  for (int r = 1; r < env.world_size; ++r) {
    if (all[static_cast<size_t>(r)] == all[0]) continue;
    std::vector<std::string> theirs;
    for (size_t a = 0, b; a <= all[static_cast<size_t>(r)].size(); a = b + 1) {
      b = all[static_cast<size_t>(r)].find('\x1f', a);
      if (b == std::string::npos) b = all[static_cast<size_t>(r)].size();
      theirs.push_back(all[static_cast<size_t>(r)].substr(a, b - a));
    }
    std::vector<std::string> base;
    for (size_t a = 0, b; a <= all[0].size(); a = b + 1) {
      b = all[0].find('\x1f', a);
      if (b == std::string::npos) b = all[0].size();
      base.push_back(all[0].substr(a, b - a));
    }
    for (size_t i = 0; i + 1 < std::min(base.size(), theirs.size()); i += 2) {
      if (base[i + 1] != theirs[i + 1]) {
        throw UsageError(fmt::format("rank {} was started with {} {}, rank 0 with {} {}: ranks must agree",
                                     r, theirs[i], theirs[i + 1], base[i], base[i + 1]));
      }
    }
  }

  const bool quiet = flags.has("quiet");
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
  for (const char* f : {"backend", "nproc", "store", "run-id", "bind", "timeout", "dump-params", "quiet", "fault",
                        "fault-rank", "fault-at"}) {
    known.insert(f);
  }
  std::vector<std::string> args;  // --quiet takes no value
  for (int i = 0; i < argc; ++i) {
    args.push_back(argv[i]);
    if (args.back() == "--quiet" && (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0)) args.push_back("true");
  }
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  const Flags flags(static_cast<int>(cargs.size()), cargs.data(), known);
  if (flags.help()) {
    std::printf("%s%s%s", kHead, ddp::config_usage(), kTail);
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  ddp::Config cfg = ddp::config_from_flags(flags);
  flags.get_choice("backend", "gloo", {"gloo", "nccl"});
  flags.get_double("timeout", 30, 0.1, 86400);
  if (flags.has("dump-params")) {
    if (std::string why = check_writable(flags.get_string("dump-params", "")); !why.empty()) {
      throw UsageError("--dump-params: " + why);
    }
  }
  if (const auto env = verify::rank_from_env()) return worker(flags, cfg, *env);
  if (!flags.has("nproc")) {
    throw UsageError("no ranks: give --nproc N, or start under torchrun/mpirun (RANK and WORLD_SIZE are not set)");
  }
  const int nproc = static_cast<int>(flags.get_int("nproc", 2, 1, ddp::kMaxWorldSize));
  if (flags.has("world-size") && cfg.world_size != nproc) {
    throw UsageError(fmt::format("--world-size {} disagrees with --nproc {}", cfg.world_size, nproc));
  }
  cfg.world_size = nproc;
  ddp::validate(cfg);
  if (flags.get_choice("backend", "gloo", {"gloo", "nccl"}) == "nccl") {
    const std::string why = verify::nccl_unavailable_reason(0, nproc);
    if (!why.empty()) {
      std::fprintf(stderr, "ddp_verify: %s\n", why.c_str());
      return 3;
    }
  }
  if (flags.has("store")) {  // fail once, here, rather than once per rank
    verify::open_store(verify::parse_store(flags.get_string("store", "")), "ddplab-check");
  }
  // A fresh rendezvous directory for this run (unless --store names one), removed afterwards.
  std::vector<std::string> extra;
  std::string dir;
  if (!flags.has("store")) {
    const char* base = std::getenv("TMPDIR");
    dir = std::string(base && *base ? base : "/tmp") + "/ddp_verify.XXXXXX";
    if (!mkdtemp(dir.data())) throw verify::SetupError("cannot create a rendezvous directory in " + dir);
    extra.push_back("DDPLAB_STORE=file:" + dir);
  }
  extra.push_back(fmt::format("DDPLAB_RUN_ID=ddplab-{}-{}", getpid(), std::time(nullptr)));
  const int status = verify::launch_local(nproc, args, extra);
  if (!dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ddplab::UsageError& e) {
    std::fprintf(stderr, "ddp_verify: %s\n", e.what());
    return 2;
  } catch (const ddplab::verify::SetupError& e) {
    std::fprintf(stderr, "ddp_verify: %s\n", e.what());
    return 2;
  } catch (const ddplab::comm::CommError& e) {
    std::fprintf(stderr, "ddp_verify: %s\n", e.what());
    return 1;
  }
}
