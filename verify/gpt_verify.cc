#include "verify/gpt_verify.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "src/compare.h"
#include "src/ddp/bucket_sync.h"
#include "src/flags.h"
#include "src/gpt/output.h"
#include "src/gpt/train.h"
#include "src/io.h"
#include "src/launch/run_flags.h"
#include "src/launch/runner.h"

namespace ddplab {

namespace {

// A vector of floats from every rank, same length on each: index r holds rank r's.
std::vector<std::vector<float>> gather(comm::Communicator& comm, const std::vector<float>& mine, int world_size) {
  std::vector<float> all(mine.size() * static_cast<size_t>(world_size));
  comm.all_gather(mine.data(), mine.size() * sizeof(float), all.data());
  std::vector<std::vector<float>> out;
  for (int r = 0; r < world_size; ++r) {
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * mine.size());
    out.emplace_back(first, first + static_cast<std::ptrdiff_t>(mine.size()));
  }
  return out;
}

int body(const Flags& flags, const gpt::RunConfig& cfg, const TextData& data, dist::Rank& rank) {
  comm::Communicator& comm = *rank.comm;
  const int ws = rank.env.world_size, me_rank = rank.env.rank;
  if (me_rank == 0) fmt::print("ddp_verify: {} backend, {} ranks | {}\n", rank.backend, ws, gpt::describe(cfg));
  std::fflush(stdout);
  gpt::GptRank me(cfg, data, me_rank);
  for (Parameter* p : me.params) comm.broadcast(p->data(), static_cast<size_t>(p->numel()), 0);  // DDP(model)
  me.start();
  gpt::GptSync sync;
  sync.global_unused = [&](const std::vector<std::vector<bool>>& local) {
    // find_unused_parameters: the local_used_map, all-reduced.
    std::vector<float> used(local[0].size());
    for (size_t i = 0; i < used.size(); ++i) used[i] = local[0][i] ? 0.0f : 1.0f;
    comm.all_reduce(used.data(), used.size(), comm::ReduceOp::sum);
    std::vector<bool> g(used.size());
    for (size_t i = 0; i < used.size(); ++i) g[i] = used[i] == 0.0f;
    return g;
  };
  std::vector<float> buf;
  sync.allreduce = [&](const std::vector<ddp::Reducer*>& reducers, size_t n) -> std::vector<ddp::HookReport> {
    ddp::Reducer& red = *reducers[0];
    if (red.comm_hook()) {
      buf.resize(std::max(buf.size(), red.max_bucket_numel()));
      return ddp::hook_buckets(red, comm, buf.data(), n);
    }
    for (size_t j = 0; j < std::min(n, red.num_buckets()); ++j) {
      buf.resize(red.bucket(j).numel);
      red.prepare_bucket(j, buf.data());
      comm.all_reduce(buf.data(), buf.size(), comm::ReduceOp::sum);
      red.finalize_bucket(j, buf.data());
    }
    return {};
  };
  const auto t0 = std::chrono::steady_clock::now();
  const gpt::GptRunResult res = gpt::run_gpt(cfg, {&me}, sync);
  const double train_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  // Rank 0 gathers every rank's parameters and logs (every rank ran as many steps).
  gpt::RankRecord mine = gpt::record_of(me);
  std::vector<float> flat;
  for (const auto& p : mine.params) flat.insert(flat.end(), p.begin(), p.end());
  const auto params = gather(comm, flat, ws);
  const auto losses = gather(comm, mine.log.losses, ws);
  const auto norms = gather(comm, mine.log.clip_norms, ws);
  std::vector<float> ev;
  for (const gpt::EvalLog& e : mine.log.evals) ev.insert(ev.end(), {e.train, e.val});
  const auto evals = gather(comm, ev, ws);
  float verdict = 0.0f;
  if (me_rank == 0) {
    std::vector<gpt::RankRecord> real(static_cast<size_t>(ws));
    for (size_t r = 0; r < real.size(); ++r) {
      real[r].names = mine.names;
      size_t off = 0;
      for (const auto& p : mine.params) {
        real[r].params.emplace_back(params[r].begin() + static_cast<std::ptrdiff_t>(off),
                                    params[r].begin() + static_cast<std::ptrdiff_t>(off + p.size()));
        off += p.size();
      }
      real[r].log.losses = losses[r];
      real[r].log.clip_norms = norms[r];
      for (size_t e = 0; e < mine.log.evals.size(); ++e) {
        real[r].log.evals.push_back({mine.log.evals[e].step, evals[r][2 * e], evals[r][2 * e + 1]});
      }
    }
    if (!flags.get_bool("quiet", false)) {
      fmt::print("{}", gpt::gpt_summary(cfg, real));
      for (const std::string& n : res.notes) fmt::print("{}\n", n);
    }
    if (!res.hook_reports.empty()) fmt::print("{}\n", ddp::format_hook_reports(cfg.comm_hook.name, res.hook_reports));
    const auto s0 = std::chrono::steady_clock::now();
    const gpt::GptSimResult sim = gpt::simulate_gpt(cfg, data);
    const double sim_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count();
    fmt::print("timing: real training {:.1f} ms (CPU, {}), simulator {:.1f} ms (CPU)\n", train_ms, rank.backend,
               sim_ms);
    bool ok = true;
    for (size_t r = 0; r < real.size(); ++r) {
      const gpt::RankRecord s = gpt::record_of(*sim.ranks[r]);
      const bool show = r == 0 || r + 1 == real.size();
      if (show) fmt::print("\n# sim vs real, rank {} (simulator all-reduce: ring, the order of Gloo's ring)\n", r);
      for (size_t i = 0; i < s.names.size(); ++i) {
        const CmpResult c =
            cmp(s.names[i], s.params[i].data(), real[r].params[i].data(), static_cast<int64_t>(s.params[i].size()));
        ok = ok && c.approximate;
        if (show) fmt::print("{}\n", format_cmp(c));
      }
      const bool same_losses = s.log.losses == real[r].log.losses && s.log.clip_norms == real[r].log.clip_norms;
      if (show) {
        fmt::print("losses{}: {}\n", cfg.clip_grad_norm > 0 ? " and clip norms" : "",
                   same_losses ? "bitwise equal" : "DIFFERENT");
      }
      ok = ok && same_losses;
      if (r > 0) {
        bool equal = true;
        for (size_t i = 0; i < s.names.size(); ++i) equal = equal && real[r].params[i] == real[0].params[i];
        ok = ok && equal;
        if (r + 1 == real.size()) {
          fmt::print("real rank {} vs real rank 0: {}\n", r, equal ? "every parameter bitwise equal" : "DIFFERENT");
        }
      }
    }
    const std::string error = res.error ? gpt::unfinished_reduction_message(*res.error) : "";
    if (res.error) {
      fmt::print("\nthe ranks stopped where torch 1.13 raises; the simulator {}\n",
                 sim.error && gpt::unfinished_reduction_message(*sim.error) == error ? "stopped at the same place"
                                                                                     : "DID NOT");
      ok = ok && sim.error && gpt::unfinished_reduction_message(*sim.error) == error;
    }
    fmt::print(ok ? "\nverified: every rank bitwise identical; the simulator agrees (see exact above)\n"
                  : "\nNOT verified: a row above is not approximately equal, or ranks differ\n");
    verdict = ok ? 0.0f : 1.0f;
    const std::string dump = flags.get_string("dump-params", "");
    if (!dump.empty()) {
      if (std::string why = write_file_atomic(dump, gpt::gpt_dump_json(cfg, real, rank.backend, error)); !why.empty()) {
        std::fprintf(stderr, "ddp_verify: --dump-params: %s\n", why.c_str());
        verdict = 1.0f;
      }
    }
    if (res.error) {  // torch's ranks fail here: so do ours, after showing that they failed alike
      std::fprintf(stderr, "ddp_verify: RuntimeError at %s\n", error.c_str());
      verdict = 1.0f;
    }
  }
  comm.broadcast(&verdict, 1, 0);  // every rank exits with rank 0's verdict
  return verdict == 0.0f ? 0 : 1;
}

}  // namespace

int run_gpt_verify(int argc, char** argv) {
  auto known = gpt::gpt_flag_names();
  for (const auto& f : dist::runner_flag_names()) known.insert(f);
  for (const char* f : {"dump-params", "quiet"}) known.insert(f);
  const Flags flags(argc, argv, known, dist::with_runner_bare_flags({"quiet", "seed-per-rank"}));
  if (flags.help()) {
    std::printf("usage: ddp_verify --model gpt --backend gloo --nproc N [flags]\n%s%s", gpt::gpt_usage(),
                dist::runner_usage().c_str());
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  gpt::RunConfig cfg = gpt::gpt_config_from_flags(flags);
  if (flags.has("dump-params")) {
    if (std::string why = check_writable(flags.get_string("dump-params", "")); !why.empty()) {
      throw UsageError("--dump-params: " + why);
    }
  }
  const dist::RunFlags run = dist::read_run_flags(flags, dist::Backends::real);
  if (run.backend == dist::Backend::nccl) {
    throw UsageError(
        "--backend nccl: the device trainer runs Linear and ReLU layers only (got --model gpt: Embedding, LayerNorm, "
        "causal attention, GELU); use --backend gloo");
  }
  const TextData data = TextData::load(cfg.data);
  data.check_batch_shape(cfg.batch_size, cfg.model.block_size);
  cfg.model.vocab_size = data.vocab_size();
  return dist::run_ranks(
      flags, run, argc, argv,
      [&](int world_size) {
        cfg.world_size = world_size;  // --nproc's: the footprint again with it (rank 0 also runs the simulator)
        gpt::check_gpt_footprint(cfg, "--nproc");
        return gpt::gpt_to_args(cfg);
      },
      [&](dist::Rank& rank) { return body(flags, cfg, data, rank); });
}

}  // namespace ddplab
