// The device-resident trainer: the graph trainer (src/device/replica.h) over the CUDA-stream ops
// (src/nccl/cuda_ops.h) on the communicator's stream.
#include "src/nccl/gpu_trainer.h"

#include <memory>
#include <stdexcept>

#include "src/device/replica.h"
#include "src/nccl/cuda_ops.h"

namespace ddplab::dist {
namespace {

void* checked_stream(const ddp::Config& cfg, comm::Communicator& comm) {
  if (std::string why = gpu_trainer_unsupported(cfg); !why.empty()) throw UsageError(why);
  void* stream = comm.device_stream();
  if (!comm.device_resident() || !stream) {
    throw std::runtime_error("the device-resident trainer needs a device-resident communicator (NCCL), got " +
                             comm.backend());
  }
  return stream;
}

}  // namespace

std::unique_ptr<device::Ops> device_ops(const ddp::Config& cfg, comm::Communicator& comm) {
  return std::make_unique<CudaStreamOps>(checked_stream(cfg, comm));
}

ddp::RankResult train_rank_on_device(const ddp::Config& cfg, comm::Communicator& comm, Kernels kernels) {
  const std::unique_ptr<device::Ops> ops = device_ops(cfg, comm);
  return device::train_rank_on_ops(cfg, comm, kernels, *ops);
}

}  // namespace ddplab::dist
