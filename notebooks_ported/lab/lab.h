// What every notebook lab shares: run a DDP configuration on the simulator (--backend sim, the default)
// or as real ranks (--backend gloo|nccl --nproc N, through src/launch/runner), then let the lab print what
// its notebook prints, rank by rank.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "src/comm/communicator.h"
#include "src/ddp/config.h"
#include "src/ddp/trainer.h"
#include "src/base/flags.h"
#include "src/launch/run_flags.h"

namespace ddplab::lab {

struct RankView {
  int rank = 0, world_size = 1;
  ddp::Replica* replica = nullptr;                             // after training
  const std::vector<ddp::BatchLog>* log = nullptr;             // this rank's batches
  const std::vector<std::vector<int64_t>>* indices = nullptr;  // this rank's sampler indices per epoch
  comm::Communicator* comm = nullptr;                          // real ranks only
};

// The labs' shared flags (backend, nproc, world-size, report and the runner's) and their usage text; with
// `threads`, --threads too (labs that run simulated ranks side by side; the Group labs do not).
std::set<std::string> lab_flag_names(bool threads = true);
std::string lab_usage(bool threads = true);
// The labs' run flags: --backend sim|gloo|nccl (default sim), and the rest of dist::read_run_flags.
dist::RunFlags lab_run_flags(const Flags& flags);

// Runs `body` on every rank of the group: threads over LocalGroup (the simulator's ring) for --backend
// sim (--world-size ranks, default `default_world_size`), one process per rank over Gloo/NCCL otherwise
// (src/launch/runner); `run` is lab_run_flags(flags); `agreement` lists the flags every real rank must have
// been started with. Returns the exit status.
int run_on_ranks(const Flags& flags, const dist::RunFlags& run, int argc, char** argv, const char* program,
                 const std::vector<std::string>& agreement, const std::function<int(comm::Communicator&)>& body,
                 int default_world_size = 2);

// Runs `cfg`, prints `progress(batch)` (unless empty) for every batch of every rank (simulator: in the order the ranks
// would interleave; real: as each rank finishes), then calls `report(view)` once per rank: in rank order in
// one process (simulator), or in each rank's own process. Returns the exit status (max over ranks).
using Progress = std::function<std::string(const ddp::BatchLog&)>;
int run_lab(const Flags& flags, const dist::RunFlags& run, int argc, char** argv, ddp::Config cfg,
            const Progress& progress, const std::function<int(RankView&)>& report);

// --dump for labs whose ranks all report in this process (the simulator): {"world_size", "ranks": [...]}.
// Returns 0, or 1 after one line on stderr when the file cannot be written; no file when `path` is empty
// or the ranks ran as separate processes.
int write_ranks_dump(const dist::RunFlags& run, const char* program, const std::string& path,
                     const std::vector<std::string>& ranks);

// One line written with one write, so concurrent ranks never cut into each other's lines.
void print_line(const std::string& line);

}  // namespace ddplab::lab
