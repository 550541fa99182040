// How big a run may be, checked before anything is allocated: a run over a ceiling, or one that would not
// fit in the memory this machine has free, is refused with one line giving the numbers (exit 2), rather
// than ending in std::bad_alloc or swapping for minutes.
#pragma once

#include <cstdint>
#include <string>

namespace ddplab {

// Ceilings, in float32 elements (2^28 elements = 1 GiB):
//   parameters x replicas held at once (a simulator holds every replica);
//   samples x features of the dataset (inputs plus targets);
//   activations: batch x the sum of the layer widths x replicas.
constexpr int64_t kMaxParameterElements = int64_t{1} << 28;
constexpr int64_t kMaxDataElements = int64_t{1} << 28;
constexpr int64_t kMaxActivationElements = int64_t{1} << 28;

struct Footprint {
  int64_t parameters = 0;   // one replica's parameter count
  int64_t replicas = 1;     // replicas held at once
  int64_t copies = 4;       // per parameter per replica: itself, its gradient, the bucket, optimizer state
  int64_t data = 0;         // dataset elements
  int64_t activations = 0;  // one replica's forward and backward activations
  // Bytes of float32 the run allocates, approximately (an estimate, not an accounting).
  double bytes() const;
};

// Throws UsageError ("... parameters x replicas = 4294967296 x 1 exceeds the ceiling of 268435456 ...")
// when a ceiling is passed or the estimate exceeds MemAvailable (/proc/meminfo). `what` names the flags.
void check_footprint(const Footprint& f, const std::string& what);

// MemAvailable in bytes, or -1 when /proc/meminfo cannot be read.
double available_memory_bytes();

}  // namespace ddplab
