#include "notebooks_ported/lab/lab.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "notebooks_ported/lab/lab_report.h"
#include "src/comm/local_group.h"
#include "src/base/io.h"
#include "src/launch/runner.h"
#include "src/base/parallel.h"

namespace ddplab::lab {

std::set<std::string> lab_flag_names(bool threads) {
  auto names = dist::runner_flag_names();
  names.insert("world-size");
  if (threads) names.insert("threads");
  names.insert("report");
  return names;
}

std::string lab_usage(bool threads) {
  return fmt::format("where it runs:\n  {:<26}the simulator in one process [{}], or one process per rank\n",
                     "--backend " + dist::backend_choices(dist::Backends::with_sim),
                     dist::backend_name(dist::Backend::sim)) +
         std::string(R"(  --world-size N            simulated ranks (sim)       --nproc N  real ranks (gloo, nccl)
  --report FILE.html        (sim) one self-contained HTML page: what the lab printed, its cmp tables coloured,
                            the loss per rank and the buckets when it trains DDP, the command line
)") + (threads ? threads_usage() : "") +
         dist::runner_usage(false);
}

dist::RunFlags lab_run_flags(const Flags& flags) { return dist::read_run_flags(flags, dist::Backends::with_sim); }

int run_on_ranks(const Flags& flags, const dist::RunFlags& run, int argc, char** argv, const char* program,
                 const std::vector<std::string>& agreement, const std::function<int(comm::Communicator&)>& body,
                 int default_world_size) {
  LabReport page(flags, run, argc, argv);  // --report: checked now, written when the ranks are done
  if (run.real()) {
    return dist::run_ranks(
        flags, run, argc, argv, [&](int) { return agreement; }, [&](dist::Rank& r) { return body(*r.comm); });
  }
  const int ws = run.world_size != 0 ? run.world_size : default_world_size;
  threads_from_flags(flags);  // checked only: here every rank is a thread of its own (they meet in collectives)
  const auto timeout = run.timeout();
  comm::LocalGroup group(ws, collective::Algorithm::ring);
  std::vector<int> status(static_cast<size_t>(ws), 0);
  std::vector<std::string> errors(static_cast<size_t>(ws));
  std::vector<std::thread> threads;
  for (int r = 0; r < ws; ++r) {
    threads.emplace_back([&, r] {
      auto c = group.communicator(r);
      c->timeout = timeout;
      try {
        status[static_cast<size_t>(r)] = body(*c);
      } catch (const std::exception& e) {  // a rank that fails reports, the others time out and report
        errors[static_cast<size_t>(r)] = e.what();
        status[static_cast<size_t>(r)] = dynamic_cast<const UsageError*>(&e) ? 2 : 1;
      }
    });
  }
  for (auto& t : threads) t.join();
  // A check every rank makes fails in every rank: say it once, not once per rank.
  std::set<std::string> said;
  for (const std::string& e : errors) {
    if (!e.empty() && said.insert(e).second) std::fprintf(stderr, "%s: %s\n", program, escape_control(e).c_str());
  }
  return std::max(*std::max_element(status.begin(), status.end()), page.write());
}

int write_ranks_dump(const dist::RunFlags& run, const char* program, const std::string& path,
                     const std::vector<std::string>& ranks) {
  if (path.empty() || run.real()) return 0;
  const std::string doc =
      fmt::format("{{\"world_size\": {}, \"ranks\": [{}]}}\n", ranks.size(), fmt::join(ranks, ",\n"));
  if (std::string why = write_file_atomic(path, doc); !why.empty()) {
    std::fprintf(stderr, "%s: --dump: %s\n", program, escape_control(why).c_str());
    return 1;
  }
  return 0;
}

void print_line(const std::string& line) {
  record_line(line);
  const std::string l = line + "\n";
  std::fwrite(l.data(), 1, l.size(), stdout);
  std::fflush(stdout);
}

int run_lab(const Flags& flags, const dist::RunFlags& run, int argc, char** argv, ddp::Config cfg,
            const Progress& progress, const std::function<int(RankView&)>& report) {
  LabReport page(flags, run, argc, argv);  // --report: checked now, written when every rank has reported
  if (!run.real()) {
    if (run.world_size != 0) cfg.world_size = run.world_size;
    cfg.threads = threads_from_flags(flags);
    ddp::validate(cfg);
    ddp::SimResult sim = ddp::simulate(cfg, false);
    page.add_simulation(cfg, sim);
    if (progress) {
      for (const auto& l : sim.log) {
        if (std::string line = progress(l); !line.empty()) print_line(line);
      }
    }
    int status = 0;
    for (int r = 0; r < cfg.world_size; ++r) {
      std::vector<ddp::BatchLog> log;
      for (const auto& l : sim.log) {
        if (l.rank == r) log.push_back(l);
      }
      std::vector<std::vector<int64_t>> indices;
      for (const auto& e : sim.sampler_indices) indices.push_back(e[static_cast<size_t>(r)]);
      RankView v{r,      static_cast<int>(cfg.world_size), sim.replicas[static_cast<size_t>(r)].get(), &log, &indices,
                 nullptr};
      status = std::max(status, report(v));
    }
    return std::max(status, page.write());
  }
  return dist::run_ddp_ranks(flags, run, argc, argv, cfg, [&](dist::Rank& rank, const ddp::Config& ranks_cfg) {
    ddp::RankResult res = ddp::train_rank(ranks_cfg, *rank.comm, rank.kernels(ranks_cfg.kernels));
    if (progress) {
      for (const auto& l : res.log) {
        if (std::string line = progress(l); !line.empty()) print_line(line);
      }
    }
    RankView v{rank.env.rank, rank.env.world_size, res.replica.get(), &res.log, &res.sampler_indices, rank.comm.get()};
    return report(v);
  });
}

}  // namespace ddplab::lab
