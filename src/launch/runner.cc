#include "src/launch/runner.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>

#include <fmt/format.h>

#include "src/collective/nccl_ring.h"
#include "src/ddp/config.h"
#include "src/gloo/gloo_comm.h"
#include "src/launch/fault.h"
#include "src/nccl/nccl_backend.h"
#include "src/store/open_store.h"

namespace ddplab::dist {

std::set<std::string> runner_flag_names() {
  return {"backend", "nproc",      "store",    "run-id",     "bind",      "timeout",
          "fault",   "fault-rank", "fault-at", "share-gpus", "nccl-exact"};
}

std::set<std::string> with_runner_bare_flags(std::set<std::string> program_bare) {
  program_bare.insert({"share-gpus", "nccl-exact"});
  return program_bare;
}

std::string runner_usage(bool backend_line) {
  // The labs say --backend (with sim) and --nproc in their own words; ddp_verify takes this line.
  return std::string("ranks:\n") +
         (backend_line ? fmt::format("  {:<26}[{}]          --nproc N  local ranks to spawn (= world size)\n",
                                     "--backend " + backend_choices(Backends::real), backend_name(Backend::gloo))
                       : "") +
         R"(  --store file:DIR|redis://[[USER]:PASSWORD@]HOST:PORT|tcp://HOST:PORT  rendezvous (a trusted
                            store; tcp: PyTorch's TCPStore, 1.x or 2.x); default: a fresh directory (local), or
                            under torchrun the store at MASTER_ADDR:MASTER_PORT: torchrun's TCPStore (tcp://),
                            or a Redis server found there (redis://); the Redis password may come from
                            DDPLAB_REDIS_PASSWORD instead
  --run-id ID               keeps runs sharing one store apart (A-Z a-z 0-9 . _ -, at most 64)
                            [ddplab; torchrun's TORCHELASTIC_RUN_ID under torchrun]
  --bind ADDR               address this rank listens on [127.0.0.1]
  --timeout S               seconds any collective may wait before failing [30]
  --share-gpus              (nccl) more ranks than GPUs: GPUs taken round-robin, each rank posing as its
                            own host (NCCL_HOSTID), connected over sockets on loopback
  --nccl-exact              (nccl) pin NCCL to one ring, one channel, the Simple protocol, so that its
                            additions follow the order the simulator's --allreduce nccl-ring reproduces
)" +
         fmt::format(
             "  --fault {} --fault-rank R --fault-at K   (tests) rank R exits or hangs at its K-th all-reduce\n",
             fault_choices());
}

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t a = 0;
  for (size_t b; (b = s.find(sep, a)) != std::string::npos; a = b + 1) out.push_back(s.substr(a, b - a));
  out.push_back(s.substr(a));
  return out;
}

// Ranks started differently would train different things: refuse, naming the first differing flag.
void check_agreement(comm::Communicator& c, const std::vector<std::string>& args) {
  const auto all = comm::all_gather_strings(c, fmt::format("{}", fmt::join(args, "\x1f")));
  const auto base = split(all[0], '\x1f');
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    const auto theirs = split(all[r], '\x1f');
    for (size_t i = 0; i + 1 < std::min(base.size(), theirs.size()); i += 2) {
      if (base[i + 1] != theirs[i + 1] || base[i] != theirs[i]) {
        throw UsageError(fmt::format("rank {} was started with {} {}, rank 0 with {} {}: ranks must agree", r,
                                     theirs[i], theirs[i + 1], base[i], base[i + 1]));
      }
    }
    throw UsageError(fmt::format("rank {} was started with other flags than rank 0", r));
  }
}

// NCCL refuses two ranks of one host on one GPU ("Duplicate GPU detected"). A rank with its own host id is
// a host of its own; with P2P and shared memory off, NCCL's net transport (sockets) carries every message.
// Variables the user set are kept, except the host id, which must differ per rank.
void pose_as_own_host(const std::string& run_id, int rank) {
  setenv("NCCL_HOSTID", fmt::format("{}-rank{}", run_id, rank).c_str(), 1);
  setenv("NCCL_P2P_DISABLE", "1", 0);
  setenv("NCCL_SHM_DISABLE", "1", 0);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
}

// One ring, one channel, the Simple protocol: the order src/collective/nccl_ring.cc reproduces. Set before
// NCCL's first call in this process (NCCL reads its variables once).
void pin_nccl_order() {
  for (const auto& [name, value] : collective::nccl_exact_environment()) setenv(name.c_str(), value.c_str(), 1);
}

// An exception that escapes a library's own thread (Gloo's network loop enforces what a hostile peer can
// break) would end the rank in std::terminate's abort: one line and status 1 instead.
int g_terminating_rank = -1, g_world_size = 0;
[[noreturn]] void on_terminate() {
  std::string what = "an exception escaped a library thread";
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
      if (const size_t nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    } catch (...) {
    }
  }
  // A peer that broke Gloo's protocol: said in ddplab's words (Gloo's own text names a line of its source).
  if (const std::string said = gloo_protocol_broken(what, g_terminating_rank, g_world_size); !said.empty()) {
    std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, escape_control(said).c_str());
  } else {
    std::fprintf(stderr, "%s: rank %d: the run failed: %s\n", program_invocation_short_name, g_terminating_rank,
                 escape_control(what).c_str());
  }
  std::fflush(stderr);
  _exit(1);
}

int worker(const Flags& flags, const RunFlags& run, const RankEnv& env,
           const std::function<std::vector<std::string>(int)>& prepare, const std::function<int(Rank&)>& body) {
  for (const int given : {run.nproc, run.world_size}) {
    if (given != 0 && given != env.world_size) {
      throw UsageError(
          fmt::format("{} says WORLD_SIZE={}, but --nproc/--world-size say {}", env.source, env.world_size, given));
    }
  }
  // Gloo sends with writev: a write to a peer that has just exited raised SIGPIPE and killed this rank
  // silently, before it could say whom it blames. Ignored, the write fails with EPIPE and Gloo throws.
  signal(SIGPIPE, SIG_IGN);
  const std::vector<std::string> agreement = prepare(env.world_size);
  const auto timeout = run.timeout();
  const std::string store_text =
      flags.get_string("store", std::getenv("DDPLAB_STORE") ? std::getenv("DDPLAB_STORE") : "");
  StoreSpec spec;
  if (!store_text.empty()) {
    spec = parse_store(store_text);
    // A rank our launcher started: the launcher identified the server already (DDPLAB_STORE_SERVER).
    if (env.source == "ddp_verify" && spec.kind == StoreKind::tcpstore && std::getenv("DDPLAB_STORE_SERVER")) {
      spec.server = parse_store_server(std::getenv("DDPLAB_STORE_SERVER")).value_or(StoreServer::unknown);
    }
  } else if (!env.master_addr.empty() && !env.master_port.empty()) {
    // torchrun's agent serves a TCPStore there (the ranks are its clients; rank 0 serves nothing). A Redis
    // server there is recognised by its reply to the first probe and used as before.
    const std::string host =
        env.master_addr.find(':') != std::string::npos ? "[" + env.master_addr + "]" : env.master_addr;
    StoreSpec at;
    try {
      at = parse_store("tcp://" + host + ":" + env.master_port);
    } catch (const UsageError&) {
      throw UsageError(fmt::format("MASTER_ADDR='{}' MASTER_PORT='{}' is not a HOST and a port in [1, 65535]",
                                   env.master_addr, env.master_port));
    }
    spec = identify_store(at.host, at.port, timeout);  // the one probe: the spec records the server
  } else {
    throw UsageError(
        "no rendezvous: give --store file:DIR (one host), redis://HOST:PORT or tcp://HOST:PORT, or "
        "MASTER_ADDR/MASTER_PORT");
  }
  g_terminating_rank = env.rank;
  g_world_size = env.world_size;
  std::set_terminate(on_terminate);
  Rank rank;
  rank.env = env;
  rank.backend = backend_name(run.backend);
  const std::string run_id =
      flags.get_string("run-id", std::getenv("DDPLAB_RUN_ID")         ? std::getenv("DDPLAB_RUN_ID")
                                 : std::getenv("TORCHELASTIC_RUN_ID") ? std::getenv("TORCHELASTIC_RUN_ID")
                                                                      : "ddplab");
  auto store = open_store(spec, run_id);
  if (run.backend == Backend::nccl) {
    const bool share = run.share_gpus;
    const std::string why = nccl_unavailable_reason(env.local_rank, env.local_world_size, share);
    if (!why.empty()) {
      std::fprintf(stderr, "rank %d: %s\n", env.rank, why.c_str());
      return 3;
    }
    if (run.nccl_exact) pin_nccl_order();
    int device = env.local_rank;
    if (share) {
      const int gpus = cuda_device_count();
      device = env.local_rank % gpus;
      if (env.local_world_size > gpus) {
        pose_as_own_host(run_id, env.rank);
        if (env.rank == 0) {
          fmt::print(
              "nccl: {} local ranks share {} GPU{} (--share-gpus): each rank poses as its own host "
              "(NCCL_HOSTID), so NCCL connects them over sockets on loopback, not NVLink/PCIe/shared memory. "
              "The transport differs from a multi-GPU node; the additions are NCCL's all the same.\n",
              env.local_world_size, gpus, gpus > 1 ? "s" : "");
          std::fflush(stdout);
        }
      }
    }
    rank.comm = connect_nccl(store, env.rank, env.world_size, device, timeout);
    rank.kernels = nccl_kernels;
  } else {
    rank.comm = connect_gloo(store, env.rank, env.world_size, flags.get_string("bind", "127.0.0.1"), timeout);
  }
  check_fault_rank(run, env.world_size);
  if (run.fault != Fault::none && run.fault_rank == env.rank) {
    rank.comm = std::make_unique<FaultyComm>(std::move(rank.comm), run.fault, run.fault_at);
  }
  check_agreement(*rank.comm, agreement);
  const int status = body(rank);
  // A fault that never fired leaves a run that proved nothing about faults: refuse it, naming why.
  if (const auto* f = dynamic_cast<const FaultyComm*>(rank.comm.get())) {
    std::fprintf(stderr, "%s: rank %d: %s\n", program_invocation_short_name, env.rank, f->not_injected().c_str());
    return 2;
  }
  return status;
}

}  // namespace

ddp::Config ddp_config_for(ddp::Config cfg, int world_size) {
  cfg.world_size = world_size;
  ddp::validate(cfg);
  return cfg;
}

int run_ddp_ranks(const Flags& flags, const RunFlags& run, int argc, char** argv, const ddp::Config& cfg,
                  const std::function<int(Rank&, const ddp::Config&)>& body) {
  return run_ranks(
      flags, run, argc, argv, [&cfg](int world_size) { return ddp::to_args(ddp_config_for(cfg, world_size)); },
      [&](Rank& rank) { return body(rank, ddp_config_for(cfg, rank.env.world_size)); });
}

int run_ranks(const Flags& flags, const RunFlags& run, int argc, char** argv,
              const std::function<std::vector<std::string>(int)>& prepare, const std::function<int(Rank&)>& body) {
  if (const auto env = rank_from_env()) return worker(flags, run, *env, prepare, body);
  if (run.nproc == 0) {
    throw UsageError("no ranks: give --nproc N, or start under torchrun/mpirun (RANK and WORLD_SIZE are not set)");
  }
  const int nproc = run.nproc;
  if (run.world_size != 0 && run.world_size != nproc) {
    throw UsageError(fmt::format("--world-size {} disagrees with --nproc {}", run.world_size, nproc));
  }
  prepare(nproc);  // bad configurations fail here, once, not once per rank
  check_fault_rank(run, nproc);
  if (run.backend == Backend::nccl) {
    const std::string why = nccl_unavailable_reason(0, nproc, run.share_gpus);
    if (!why.empty()) {
      std::fprintf(stderr, "%s: %s\n", argv[0], why.c_str());
      return 3;
    }
  }
  // Checked once here rather than once per rank: the bind address, the run id, the store.
  if (run.backend == Backend::gloo) resolve_bind(flags.get_string("bind", "127.0.0.1"));
  if (flags.has("run-id")) check_run_id(flags.get_string("run-id", ""));
  std::vector<std::string> extra;
  extra.push_back(fmt::format("DDPLAB_RUN_ID=ddplab-{}-{}", getpid(), std::time(nullptr)));
  if (flags.has("store")) {
    // The ranks parse --store from their own command line but take the server identified here: no probe each.
    const StoreSpec spec = check_store(parse_store(flags.get_string("store", "")));
    if (spec.server != StoreServer::unknown) {
      extra.push_back(fmt::format("DDPLAB_STORE_SERVER={}", store_server_name(spec.server)));
    }
  }
  // The survivors of a failure get the blame window (they wait for alive peers to report) and 2 s; NCCL
  // may notice a dead peer only at the timeout.
  const double window_s = static_cast<double>(blame_window(run.timeout()).count()) / 1000;
  const double grace_s =
      (run.backend == Backend::nccl ? std::max(std::min(run.timeout_s, 60.0), window_s) : window_s) + 2.0;
  // Without --store, a fresh rendezvous directory, removed afterwards (also when the launcher is killed).
  return launch_local(nproc, std::vector<std::string>(argv, argv + argc), extra, grace_s, !flags.has("store"));
}

}  // namespace ddplab::dist
