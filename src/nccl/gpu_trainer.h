// The NCCL backend's DDP training with the model on the GPU: the graph trainer (src/device/replica.h: the
// host model's Linear and ReLU layers as a graph over an ops interface) over the CUDA-stream ops
// (src/nccl/cuda_ops.h). Parameters, gradients, bucket buffers and optimizer state stay in device memory
// for the whole run; only batches go host -> device (through pinned memory) and the parameters come back
// once, at the end. Everything runs on the communicator's stream.
//
// Semantics are train_rank()'s (src/ddp/trainer.cc), see src/device/replica.h. With --kernels reference the
// result equals the host trainer's bit for bit; with --kernels fast Linear runs on cuBLAS. Logged losses are
// close to, not bitwise equal to, the host's (a device sum, see gpu_trainer_ops.h).
//
// No host wait can hang on a dead peer: the host only waits on the stream (events, final copy) when every
// collective enqueued so far has finished, which all_reduce_device guarantees when it returns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/comm/communicator.h"
#include "src/data/data.h"
#include "src/ddp/config.h"
#include "src/ddp/flag_table.h"
#include "src/ddp/trainer.h"
#include "src/device/replica.h"
#include "src/tensor/kernels.h"

namespace ddplab::dist {

// "" when train_rank_on_device supports `cfg`, else one line saying why (for a UsageError): a layer the
// device graph has no node for (named with its state_dict prefix), or a loss other than MSE. Throws
// UsageError for a model that does not fit cfg's data (see device::unsupported_layer).
inline std::string gpu_trainer_unsupported(const ddp::Config& cfg) {
  if (std::string layer = device::unsupported_layer(cfg); !layer.empty()) {
    return "--compute device keeps the model on the GPU for Linear and ReLU layers only (got " + layer +
           "); --compute host (the default) runs every model on NCCL";
  }
  if (cfg.loss != ddp::LossKind::mse) {
    return "--compute device keeps the model on the GPU for --loss mse only (got " + ddp::loss_name(cfg.loss) +
           "); --compute host (the default) runs every loss on NCCL";
  }
  if (cfg.no_sync > 1 && cfg.no_sync_loss == ddp::NoSyncLoss::divide) {  // its MSE backward seeds d loss = 1
    return "--compute device backpropagates loss.backward() on each micro-batch only (got --no-sync-loss divide); "
           "--compute host (the default) runs (loss / K).backward() on NCCL";
  }
  if (cfg.sync_on != ddp::SyncOn::last) {  // its sync_and_step all-reduces and steps together
    return "--compute device all-reduces on a step's last micro-batch only (got --sync-on " +
           ddp::choice_names().sync_on[static_cast<size_t>(cfg.sync_on)] +
           "); --compute host (the default) runs the misuse on NCCL";
  }
  if (cfg.loss_divisor > 1) {  // the same: d loss = 1
    return "--compute device backpropagates loss.backward() only (got --loss-divisor " +
           std::to_string(cfg.loss_divisor) + "); --compute host (the default) runs (loss / D).backward() on NCCL";
  }
  if (cfg.zero) {  // src/ddp/zero.h steps host parameters; the device graph has no sharded optimizer
    return "--compute device has no ZeroRedundancyOptimizer (--zero true): --compute host (the default) runs it on "
           "NCCL";
  }
  if (cfg.comm_hook.name != "none") {  // the hooks run on host buffers (bucket_sync.h's hook_buckets)
    return "--comm-hook " + cfg.comm_hook.name +
           ": --compute device keeps its buckets on the GPU and has no hook path; --compute host (the default) runs "
           "the hooks on NCCL";
  }
  return "";
}

// The ops that keep a replica in device memory: the CUDA-stream ops on the communicator's stream, for a
// device::GraphReplica (src/device/replica.h; declare the ops first: the replica uses their memory).
// Throws UsageError for configurations gpu_trainer_unsupported() names, std::runtime_error when `comm` is
// not device-resident or the binary was built without CUDA.
std::unique_ptr<device::Ops> device_ops(const ddp::Config& cfg, comm::Communicator& comm);

// train_rank() on the device: the same epochs, batches, syncs and steps; returns the same RankResult
// (final parameters in replica->model, sampler indices, per-batch losses, optimizer steps, and
// train_seconds: the training loop including the wait for the GPU, not the setup or the final copy).
// Throws UsageError for configurations gpu_trainer_unsupported() names, comm::CommError when a
// collective fails, std::runtime_error for CUDA errors (or when built without CUDA).
ddp::RankResult train_rank_on_device(const ddp::Config& cfg, comm::Communicator& comm, Kernels kernels);

}  // namespace ddplab::dist
