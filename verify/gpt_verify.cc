#include "verify/gpt_verify.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "src/base/compare.h"
#include "src/ddp/rank_sync.h"
#include "src/base/flags.h"
#include "src/report/gpt_output.h"
#include "src/gpt/train.h"
#include "src/base/io.h"
#include "src/launch/run_flags.h"
#include "src/launch/runner.h"

namespace ddplab {

namespace {

// A vector of floats from every rank (lengths may differ: under --uneven a rank runs fewer steps): index r
// holds rank r's.
std::vector<std::vector<float>> gather(comm::Communicator& comm, const std::vector<float>& mine) {
  const auto got =
      comm::all_gather_strings(comm, std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(float)));
  std::vector<std::vector<float>> out;
  for (const std::string& g : got) {
    std::vector<float> v(g.size() / sizeof(float));
    std::memcpy(v.data(), g.data(), v.size() * sizeof(float));
    out.push_back(std::move(v));
  }
  return out;
}

int body(const Flags& flags, const gpt::RunConfig& cfg, const TextData& data, dist::Rank& rank) {
  comm::Communicator& comm = *rank.comm;
  const int ws = rank.env.world_size, me_rank = rank.env.rank;
  if (me_rank == 0) {
    fmt::print("ddp_verify: {} backend, {} ranks | {}\n{}", rank.backend, ws, ddp::describe(cfg),
               ddp::describe_notes(cfg));
  }
  std::fflush(stdout);
  gpt::GptRank me(cfg, data, me_rank);
  ddp::init_ddp(cfg, me, [&](ddp::TrainingRank& r) { ddp::broadcast_model(comm, r); });  // DDP(model)
  me.start();
  ddp::CommunicatorSync over(cfg, comm);
  const auto t0 = std::chrono::steady_clock::now();
  const ddp::TrainLog res = ddp::run_training(cfg, {&me}, over.sync(false));
  comm.context = "after training";
  const double train_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  // Rank 0 gathers every rank's parameters and logs (every rank ran as many steps).
  report::RankRecord mine = report::record_of(me);
  std::vector<float> flat;
  for (const auto& p : mine.params) flat.insert(flat.end(), p.begin(), p.end());
  const auto params = gather(comm, flat);
  const auto losses = gather(comm, mine.log.losses);
  const auto norms = gather(comm, mine.log.clip_norms);
  std::vector<float> ev;
  for (const gpt::EvalLog& e : mine.log.evals) ev.insert(ev.end(), {e.train, e.val});
  const auto evals = gather(comm, ev);
  float verdict = 0.0f;
  if (me_rank == 0) {
    std::vector<report::RankRecord> real(static_cast<size_t>(ws));
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
      for (size_t e = 0; e < mine.log.evals.size() && 2 * e + 1 < evals[r].size(); ++e) {
        real[r].log.evals.push_back({mine.log.evals[e].step, evals[r][2 * e], evals[r][2 * e + 1]});
      }
    }
    if (!flags.get_bool("quiet", false)) {
      fmt::print("{}", report::gpt_summary(cfg, real));
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
      const report::RankRecord s = report::record_of(*sim.ranks[r]);
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
      if (std::string why = write_file_atomic(dump, report::gpt_dump_json(cfg, real, rank.backend, error)); !why.empty()) {
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

int run_gpt_verify(const Flags& flags, const dist::RunFlags& run, int argc, char** argv, ddp::Config cfg) {
  if (flags.has("report")) throw UsageError("--report does not apply to --model gpt (the sequential models' output)");
  const TextData data = TextData::load(cfg.data);
  data.check_batch_shape(cfg.batch_size, cfg.gpt.block_size);
  cfg.gpt.vocab_size = data.vocab_size();
  return dist::run_ddp_ranks(flags, run, argc, argv, cfg, [&](dist::Rank& rank, const ddp::Config& ranks_cfg) {
    return body(flags, ranks_cfg, data, rank);
  });
}

}  // namespace ddplab
