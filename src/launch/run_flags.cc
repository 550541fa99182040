// The run flags (run_flags.h): their choice lists, and the one place they are read.
#include "src/launch/run_flags.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "src/ddp/config.h"

namespace ddplab::dist {

namespace {

// In the order of the enums: the value is the name's index.
const std::vector<std::string>& backend_names() {
  static const std::vector<std::string> names = {"sim", "gloo", "nccl"};
  return names;
}
const std::vector<std::string>& fault_names() {
  static const std::vector<std::string> names = {"none", "exit", "hang"};
  return names;
}

// The choices a program offers: all backends, or the real ones; the faults one can ask for.
std::vector<std::string> offered(const std::vector<std::string>& names, size_t first) {
  return {names.begin() + static_cast<std::ptrdiff_t>(first), names.end()};
}
std::vector<std::string> backends_offered(Backends b) { return offered(backend_names(), b == Backends::real ? 1 : 0); }

size_t index_of(const std::vector<std::string>& names, const std::string& s) {
  size_t i = 0;
  while (i < names.size() && names[i] != s) ++i;
  return i;
}

// On the simulator or on real ranks, the flags the other kind of run reads would silently do nothing.
void refuse_what_cannot_take_effect(const Flags& flags, Backend backend) {
  if (backend != Backend::sim) {
    if (flags.has("threads")) {
      throw UsageError(
          fmt::format("--threads takes effect only on the simulator (--backend {}): real ranks do not "
                      "read it",
                      backend_name(Backend::sim)));
    }
    return;
  }
  for (const char* f : {"fault", "fault-rank", "fault-at", "store", "run-id", "bind"}) {
    if (flags.has(f)) {
      throw UsageError(fmt::format("--{} takes effect only on real ranks (--backend {}): the simulator {}", f,
                                   backend_choices(Backends::real),
                                   f[0] == 'f' ? "injects no faults" : "meets through no store"));
    }
  }
  if (flags.has("nproc")) {
    throw UsageError(
        fmt::format("--nproc starts real ranks: use it with --backend {}", backend_choices(Backends::real)));
  }
}

}  // namespace

const std::string& backend_name(Backend b) { return backend_names()[static_cast<size_t>(b)]; }
const std::string& fault_name(Fault f) { return fault_names()[static_cast<size_t>(f)]; }

std::string backend_choices(Backends b) { return fmt::format("{}", fmt::join(backends_offered(b), "|")); }
std::string fault_choices() { return fmt::format("{}", fmt::join(offered(fault_names(), 1), "|")); }

std::chrono::milliseconds RunFlags::timeout() const {
  return std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
}

namespace {

RunFlags read_run_flags_impl(const Flags& flags, Backends backends, int world_size) {
  RunFlags run;
  const Backend def = backends == Backends::real ? Backend::gloo : Backend::sim;
  run.backend = static_cast<Backend>(
      index_of(backend_names(), flags.get_choice("backend", backend_name(def), backends_offered(backends))));
  if (backends == Backends::with_sim) refuse_what_cannot_take_effect(flags, run.backend);
  run.timeout_s = flags.get_double("timeout", 30, 0.1, 86400);
  // Refused on gloo and on the simulator alike: neither has GPUs to share or an NCCL to pin.
  const auto nccl_only = [&](const char* f) {
    const bool on = flags.get_bool(f, false);
    if (on && run.backend != Backend::nccl) {
      throw UsageError(fmt::format("--{} needs --backend {}", f, backend_name(Backend::nccl)));
    }
    return on;
  };
  run.share_gpus = nccl_only("share-gpus");
  run.nccl_exact = nccl_only("nccl-exact");
  run.nproc = static_cast<int>(flags.get_int("nproc", 0, 1, ddp::kMaxWorldSize));
  run.world_size = world_size;
  if (!flags.has("fault")) {  // a fault aimed nowhere would silently inject nothing
    for (const char* f : {"fault-rank", "fault-at"}) {
      if (flags.has(f)) throw UsageError(fmt::format("--{} needs --fault {}", f, fault_choices()));
    }
    return run;
  }
  run.fault = static_cast<Fault>(
      index_of(fault_names(), flags.get_choice("fault", fault_name(Fault::exit), offered(fault_names(), 1))));
  run.fault_rank = flags.get_int("fault-rank", 0, INT64_MIN, INT64_MAX);
  run.fault_at = static_cast<int>(flags.get_int("fault-at", 1, 1, 1 << 30));
  return run;
}

}  // namespace

RunFlags read_run_flags(const Flags& flags, Backends backends, int64_t config_world_size) {
  return read_run_flags_impl(flags, backends, flags.has("world-size") ? static_cast<int>(config_world_size) : 0);
}

RunFlags read_run_flags(const Flags& flags, Backends backends) {
  return read_run_flags_impl(flags, backends,
                             static_cast<int>(flags.get_int("world-size", 0, 1, ddp::kMaxWorldSize)));
}

void check_fault_rank(const RunFlags& run, int world_size) {
  if (run.fault != Fault::none) check_range("fault-rank", run.fault_rank, 0, world_size - 1);
}

}  // namespace ddplab::dist
