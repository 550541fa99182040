#include "src/tensor/cpu_capability.h"

#include <cstdlib>
#include <cstring>

#include <cpuinfo.h>

namespace ddplab {
namespace {

CpuCapability compute() {
  if (const char* env = std::getenv("ATEN_CPU_CAPABILITY")) {
    if (std::strcmp(env, "avx512") == 0) return CpuCapability::kAvx512;
    if (std::strcmp(env, "avx2") == 0) return CpuCapability::kAvx2;
    if (std::strcmp(env, "default") == 0) return CpuCapability::kDefault;
    // torch warns and decides from the processor: so do we (the warning is torch's to give)
  }
  // torch 1.13 runs AVX-512 kernels only when asked to: on a processor where cpuinfo reports avx512vl, bw
  // and dq it still says AVX2 (measured; tests/torch_sum_test.cc checks it on every machine it runs on).
  if (cpuinfo_initialize() && cpuinfo_has_x86_avx2() && cpuinfo_has_x86_fma3()) return CpuCapability::kAvx2;
  return CpuCapability::kDefault;
}

}  // namespace

CpuCapability torch_cpu_capability() {
  static const CpuCapability c = compute();
  return c;
}

std::string capability_name(CpuCapability c) {
  switch (c) {
    case CpuCapability::kAvx512: return "AVX512";
    case CpuCapability::kAvx2: return "AVX2";
    case CpuCapability::kDefault: break;
  }
  return "DEFAULT";
}

int64_t float_lanes(CpuCapability c) { return c == CpuCapability::kAvx512 ? 16 : 8; }

bool cpu_has_avx512() {
  return cpuinfo_initialize() && cpuinfo_has_x86_avx512vl() && cpuinfo_has_x86_avx512bw() &&
         cpuinfo_has_x86_avx512dq();
}

}  // namespace ddplab
