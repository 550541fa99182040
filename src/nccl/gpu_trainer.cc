// The device-resident trainer: the graph trainer (src/device/replica.h) over the CUDA-stream ops
// (src/nccl/cuda_ops.h) on the communicator's stream.
#include "src/nccl/gpu_trainer.h"

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

struct DeviceReplica::Impl {
  CudaStreamOps ops;  // declared first: destroyed after the replica that uses its memory
  device::GraphReplica replica;
  Impl(const ddp::Config& cfg, comm::Communicator& comm, Kernels kernels, ddp::Replica& host, int64_t max_batches)
      : ops(checked_stream(cfg, comm)), replica(cfg, comm, kernels, host, ops, max_batches) {}
};

DeviceReplica::DeviceReplica(const ddp::Config& cfg, comm::Communicator& comm, Kernels kernels, ddp::Replica& host,
                             int64_t max_batches)
    : impl_(std::make_unique<Impl>(cfg, comm, kernels, host, max_batches)) {}
DeviceReplica::~DeviceReplica() = default;
void DeviceReplica::forward_backward(const Dataset& data, const std::vector<int64_t>& idx) {
  impl_->replica.forward_backward(data, idx);
}
void DeviceReplica::sync_and_step() { impl_->replica.sync_and_step(); }
void DeviceReplica::wait() { impl_->replica.wait(); }
std::vector<float> DeviceReplica::download_losses() { return impl_->replica.download_losses(); }
void DeviceReplica::download_parameters() { impl_->replica.download_parameters(); }

ddp::RankResult train_rank_on_device(const ddp::Config& cfg, comm::Communicator& comm, Kernels kernels) {
  CudaStreamOps ops(checked_stream(cfg, comm));
  return device::train_rank_on_ops(cfg, comm, kernels, ops);
}

}  // namespace ddplab::dist
