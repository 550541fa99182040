// Running a program as N ranks, the way ddp_verify and the notebook labs do: with --nproc N it launches N
// copies of itself (like torchrun --standalone); started under torchrun or mpirun (RANK/WORLD_SIZE or
// OMPI_COMM_WORLD_*) it is one rank: it meets the others through a store, connects Gloo or NCCL, checks
// that every rank was started with the same flags, and runs the program's body.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "src/comm/communicator.h"
#include "src/ddp/config.h"
#include "src/base/flags.h"
#include "src/tensor/kernels.h"
#include "src/launch/launcher.h"
#include "src/launch/run_flags.h"

namespace ddplab::dist {

// backend nproc store run-id bind timeout fault fault-rank fault-at share-gpus nccl-exact
std::set<std::string> runner_flag_names();
// The runner flags that may stand alone (--share-gpus, --nccl-exact), added to a program's own bare flags.
std::set<std::string> with_runner_bare_flags(std::set<std::string> program_bare = {});
// The runner flags' usage text; `backend_line` false leaves out --backend/--nproc (a lab words its own).
std::string runner_usage(bool backend_line = true);

struct Rank {
  RankEnv env;
  std::string backend;  // "gloo" | "nccl"
  std::unique_ptr<comm::Communicator> comm;
  // Linear's kernels on this backend: the CPU's (Gloo), or the GPU's (NCCL); ddp::train_rank takes them.
  const LinearKernels& (*kernels)(Kernels) = cpu_kernels;
};

// `run` is read_run_flags(flags) with a real backend. `prepare(world_size)` validates the program's
// configuration for that world size (throwing UsageError) and returns the flags every rank must agree on.
// `body` runs in each rank; its return value is the rank's exit status. Returns this process's exit status:
// 2 bad input, 3 backend unavailable.
int run_ranks(const Flags& flags, const RunFlags& run, int argc, char** argv,
              const std::function<std::vector<std::string>(int world_size)>& prepare,
              const std::function<int(Rank&)>& body);

// `cfg` for `world_size` ranks: world_size set, validated (throws UsageError).
ddp::Config ddp_config_for(ddp::Config cfg, int world_size);

// run_ranks for a DDP configuration: `prepare` is ddp_config_for (ranks agree on all of its flags), and
// `body` gets the configuration it produced for the group's world size. `cfg` itself is left as it is.
int run_ddp_ranks(const Flags& flags, const RunFlags& run, int argc, char** argv, const ddp::Config& cfg,
                  const std::function<int(Rank&, const ddp::Config&)>& body);

}  // namespace ddplab::dist
