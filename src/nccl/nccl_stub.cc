// Built where no CUDA toolkit was found at build time: the NCCL backend explains itself and is never used.
#include <fmt/format.h>

#include "src/nccl/nccl_backend.h"

namespace ddplab::dist {

std::string nccl_unavailable_reason(int, int local_world_size, bool share_gpus) {
  return fmt::format(
      "NCCL backend needs {} CUDA devices; this binary was built without CUDA (no CUDA toolkit "
      "at /usr/local/cuda or $CUDA_HOME when it was built)",
      share_gpus ? 1 : local_world_size);
}

int cuda_device_count() { return 0; }

std::string nccl_version() { return "none"; }

const LinearKernels& nccl_kernels(Kernels k) { return cpu_kernels(k); }  // never reached: no CUDA

std::unique_ptr<comm::Communicator> connect_nccl(std::shared_ptr<Store>, int, int, int, std::chrono::milliseconds) {
  throw SetupError(nccl_unavailable_reason(0, 1));
}

}  // namespace ddplab::dist
