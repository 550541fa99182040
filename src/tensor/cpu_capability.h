// Which of ATen's CPU kernel families torch runs on this machine (its CPU capability): the lane count of
// Vectorized<float>, and so the order torch's vectorised reductions add in (torch_sum.h).
//
// Decided as torch 1.13's DispatchStub decides it, once per process: ATEN_CPU_CAPABILITY ("avx512", "avx2",
// "default"; anything else ignored, as torch ignores it), or else AVX2 where cpuinfo (libcpuinfo, the library
// Debian's torch links) reports avx2 and fma3. AVX-512 is opt-in for torch 1.13: measured on an AMD EPYC whose
// libcpuinfo reports avx512vl, avx512bw and avx512dq, torch 1.13 says AVX2 (torch.__config__.show()) unless
// ATEN_CPU_CAPABILITY=avx512; pip's torch 2.15 on the same machine says AVX512 by itself. (PyTorch made
// AVX-512 opt-in in 1.12, pytorch/pytorch#80253, "as it can be slower"; 2.1 re-enabled it for some kernels.)
#pragma once

#include <cstdint>
#include <string>

namespace ddplab {

enum class CpuCapability { kDefault, kAvx2, kAvx512 };

CpuCapability torch_cpu_capability();
std::string capability_name(CpuCapability c);  // "DEFAULT", "AVX2", "AVX512", as torch.__config__.show() says
// Vectorized<float>::size() under `c`: 16 for AVX512, 8 otherwise (the DEFAULT build's vector is 32 bytes too).
int64_t float_lanes(CpuCapability c);
// Whether this processor and OS can run the AVX-512 kernels (what cpuinfo reports), whatever torch picks.
bool cpu_has_avx512();

}  // namespace ddplab
