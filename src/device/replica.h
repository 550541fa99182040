// The graph trainer: train_rank()'s loop (src/ddp/trainer.cc) with the model as a Graph (src/device/graph.h)
// over an Ops (src/device/ops.h). Parameters, gradients, bucket buffer and optimizer state stay in the
// Ops' memory for the whole run; only batches are uploaded, and the parameters come back once, at the end.
//
// Semantics are train_rank()'s: the host builds the data, the initial weights (make_model), the
// DistributedSampler and DataLoader, and the bucket layout (a host Reducer, used only for its buckets and
// the rebuild); the bucket loop is the host's (src/ddp/bucket_sync.h) over the Ops' memory; the graph
// mirrors autograd's gradient accumulation under no_sync, MSE, Linear, ReLU, SGD and Adam operation for
// operation. With CpuOps the parameters and gradients equal the host trainer's bit for bit (both kernel
// modes); the CUDA ops (src/nccl/gpu_trainer.h) equal it with --kernels reference. Logged losses are the
// MSE kernel's fixed-order sum: close to, not bitwise equal to, the host's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/comm/communicator.h"
#include "src/data/data.h"
#include "src/ddp/config.h"
#include "src/ddp/trainer.h"
#include "src/device/ops.h"
#include "src/tensor/kernels.h"

namespace ddplab::device {

// "" when the graph runs every layer of cfg's model, else `layer "<prefix>": <repr>` of the first it cannot.
// Throws UsageError when the model does not fit cfg's data (validate() refuses such a config too).
std::string unsupported_layer(const ddp::Config& cfg);

// One rank's replica in the Ops' memory, mirroring `host` (a freshly constructed ddp::Replica: its model
// is uploaded as make_model made it, and later receives the final parameters; its sampler and loader
// draw the batches; its optimizer and reducer stay unused). Construction also runs DDP's broadcast of
// rank 0's parameters (Ops::broadcast, one tensor at a time) when cfg.broadcast, and builds the bucket
// layout. `max_batches`: micro-batches (losses) to make room for; -1: cfg.epochs * host.loader.len().
// Throws UsageError for a loss other than MSE or a layer the graph has no node for.
class GraphReplica {
 public:
  GraphReplica(const ddp::Config& cfg, comm::Communicator& comm, Kernels kernels, ddp::Replica& host, Ops& ops,
               int64_t max_batches = -1);
  ~GraphReplica();
  GraphReplica(const GraphReplica&) = delete;
  GraphReplica& operator=(const GraphReplica&) = delete;

  // Forward, MSE loss and backward on the samples `idx`; gradients accumulate until sync_and_step.
  void forward_backward(const Dataset& data, const std::vector<int64_t>& idx);
  // The synchronised backward: every bucket prepared, all-reduced and finalized, the bucket rebuild after
  // the first one, one optimizer step, zero_grad(set_to_none=True).
  void sync_and_step();
  // Waits until the Ops are idle. Only when no collective can be pending (e.g. after sync_and_step).
  void wait();
  // The losses of every forward_backward so far; the parameters into host.model; the gradients of the
  // last synchronised backward (what the last step used), flat in model.parameters() order. Each waits.
  std::vector<float> download_losses();
  void download_parameters();
  std::vector<float> download_gradients();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// train_rank() over `ops`: the same epochs, batches, syncs and steps; returns the same RankResult (final
// parameters in replica->model, sampler indices, per-batch losses, optimizer steps, and train_seconds: the
// training loop including the wait for the Ops, not the setup or the final copy). `final_grads`, when
// given, receives download_gradients() at the end.
ddp::RankResult train_rank_on_ops(const ddp::Config& cfg, comm::Communicator& comm, Kernels kernels, Ops& ops,
                                  std::vector<float>* final_grads = nullptr);

}  // namespace ddplab::device
