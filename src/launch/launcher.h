// Rank discovery and local launching, like torchrun --standalone / mp.spawn.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddplab::dist {

// Who this process is, from the environment: torchrun's RANK, WORLD_SIZE, LOCAL_RANK (+ MASTER_ADDR,
// MASTER_PORT) or OpenMPI's OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK.
struct RankEnv {
  int rank = 0, world_size = 0, local_rank = 0;
  int local_world_size = 0;              // ranks on this host (torchrun's LOCAL_WORLD_SIZE); GPUs needed here
  std::string source;                    // "torchrun" | "openmpi" | "ddp_verify"
  std::string master_addr, master_port;  // torchrun's, if set
};
// nullopt when no launcher variables are set; throws UsageError when they are set but missing,
// inconsistent, or out of range (the world size has --nproc's limit, ddp::kMaxWorldSize): one clear line.
std::optional<RankEnv> rank_from_env();

// Starts `nproc` copies of this program with RANK/WORLD_SIZE/LOCAL_RANK set and `extra_env` added, waits,
// and returns 0 when all exit 0. When one fails, the others get `grace_s` to report the failure themselves,
// then SIGTERM, then SIGKILL 5 s later; the first failure's status is returned (a rank's status outside
// 0..3, or its death by a signal, counts as 1), after one line naming the rank.
// With `fresh_store_dir`, the ranks meet in a new temporary directory (DDPLAB_STORE=file:DIR), removed at
// the end. Nothing outlives the launcher: ranks die with it (PR_SET_PDEATHSIG), SIGTERM/SIGINT/SIGHUP are
// forwarded to them (status 1 once they are gone), and a watchdog process removes the directory even when
// the launcher is killed with SIGKILL.
int launch_local(int nproc, const std::vector<std::string>& args, std::vector<std::string> extra_env, double grace_s,
                 bool fresh_store_dir);

}  // namespace ddplab::dist
