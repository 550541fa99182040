// Where a run's ranks run and how long they wait, as flags read once: --backend, --nproc, --world-size,
// --timeout, --share-gpus, --nccl-exact and the fault injection (--fault, --fault-rank, --fault-at).
// ddp_verify, nccl_order, the launcher, each rank and the notebook labs all take them from here, and each
// choice list lives here once: the parser, the usage text and the errors are made from it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "src/base/flags.h"

namespace ddplab::dist {

enum class Backend { sim, gloo, nccl };
// Which --backend a program takes: the labs also run on the simulator (sim|gloo|nccl, default sim);
// ddp_verify and nccl_order start real ranks only (gloo|nccl, default gloo).
enum class Backends { real, with_sim };
enum class Fault { none, exit, hang };

const std::string& backend_name(Backend b);
const std::string& fault_name(Fault f);
// "gloo|nccl" or "sim|gloo|nccl"; "exit|hang": as the usage text and the errors show the choices.
std::string backend_choices(Backends b);
std::string fault_choices();

struct RunFlags {
  Backend backend = Backend::gloo;
  int nproc = 0;       // --nproc; 0 when not given
  int world_size = 0;  // --world-size; 0 when not given
  double timeout_s = 30;
  bool share_gpus = false, nccl_exact = false;
  Fault fault = Fault::none;
  int64_t fault_rank = 0;  // its range is the run's world size: check_fault_rank
  int fault_at = 1;

  bool real() const { return backend != Backend::sim; }
  std::chrono::milliseconds timeout() const;
};

// Reads and checks them all (each UsageError names the flag and its limit). With the simulator among the
// backends, a flag the chosen kind of run never reads is refused (issue 19, cause 7): on the simulator the
// fault flags, --store, --run-id, --bind and --nproc; on real ranks --threads.
RunFlags read_run_flags(const Flags& flags, Backends backends);
// The same for a program whose flag table has read --world-size already (ddp_verify's ddp::Config): that value
// is taken, not parsed again, so one flag has one reading and one refusal.
RunFlags read_run_flags(const Flags& flags, Backends backends, int64_t config_world_size);

// --fault-rank must name a rank of the run: in [0, world_size - 1]; throws UsageError.
void check_fault_rank(const RunFlags& run, int world_size);

}  // namespace ddplab::dist
