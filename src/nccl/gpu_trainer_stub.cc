// Built where no CUDA toolkit was found at build time: the device-resident trainer says so. Never reached
// through ddp_verify (the NCCL backend stops earlier with exit status 3).
#include <stdexcept>

#include "src/nccl/gpu_trainer.h"

namespace ddplab::dist {
namespace {

[[noreturn]] void no_cuda() {
  throw std::runtime_error(
      "the device-resident trainer needs CUDA: this binary was built without it (no CUDA "
      "toolkit at /usr/local/cuda or $CUDA_HOME when it was built)");
}

}  // namespace

std::unique_ptr<device::Ops> device_ops(const ddp::Config& cfg, comm::Communicator&) {
  if (std::string why = gpu_trainer_unsupported(cfg); !why.empty()) throw UsageError(why);
  no_cuda();
}

ddp::RankResult train_rank_on_device(const ddp::Config& cfg, comm::Communicator&, Kernels) {
  if (std::string why = gpu_trainer_unsupported(cfg); !why.empty()) throw UsageError(why);
  no_cuda();
}

}  // namespace ddplab::dist
