#include "src/base/limits.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "src/base/flags.h"

namespace ddplab {

double Footprint::bytes() const {
  return 4.0 * (static_cast<double>(parameters) * static_cast<double>(copies) * static_cast<double>(replicas) +
                static_cast<double>(data) + static_cast<double>(activations) * static_cast<double>(replicas));
}

double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string key;
    double kib = 0;
    if (s >> key >> kib && key == "MemAvailable:") return kib * 1024.0;
  }
  return -1;
}

void check_footprint(const Footprint& f, const std::string& what) {
  // Products in double: the factors are bounded by the flags, but their product may exceed int64.
  const auto over = [&](double value, int64_t ceiling, const std::string& expr) {
    if (value > static_cast<double>(ceiling)) {
      throw UsageError(fmt::format("{}: {} = {:.0f} exceeds the ceiling of {} float32 elements ({} GiB)", what, expr,
                                   value, ceiling, ceiling >> 28));
    }
  };
  over(static_cast<double>(f.parameters) * static_cast<double>(f.replicas), kMaxParameterElements,
       fmt::format("parameters x replicas = {} x {}", f.parameters, f.replicas));
  over(static_cast<double>(f.data), kMaxDataElements, "samples x features");
  over(static_cast<double>(f.activations) * static_cast<double>(f.replicas), kMaxActivationElements,
       fmt::format("batch activations x replicas = {} x {}", f.activations, f.replicas));
  const double avail = available_memory_bytes();
  if (avail > 0 && f.bytes() > avail) {
    throw UsageError(fmt::format("{}: needs about {:.1f} GiB, but this machine has {:.1f} GiB available", what,
                                 f.bytes() / (1 << 30), avail / (1 << 30)));
  }
}

}  // namespace ddplab
