// Built where no CUDA toolkit was found at build time: the NCCL backend explains itself and is never used.
#include <fmt/format.h>

#include "verify/nccl_backend.h"

namespace ddplab::verify {

std::string nccl_unavailable_reason(int, int local_world_size) {
  return fmt::format("NCCL backend needs {} CUDA devices; this binary was built without CUDA (no CUDA toolkit "
                     "at /usr/local/cuda or $CUDA_HOME when it was built)",
                     local_world_size);
}

const LinearKernels& nccl_kernels(Kernels k) { return cpu_kernels(k); }  // never reached: no CUDA

std::unique_ptr<comm::Communicator> connect_nccl(std::shared_ptr<Store>, int, int, int, std::chrono::milliseconds) {
  throw SetupError(nccl_unavailable_reason(0, 0));
}

}  // namespace ddplab::verify
