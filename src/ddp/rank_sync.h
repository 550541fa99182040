// How one real rank meets the others, over its Communicator (Gloo, or the NCCL backend's host side): DDP's
// constructor broadcast, the bucketed all-reduce (a joined rank's zeros, or its comm hook), the
// find_unused_parameters map, DDP's and Join's broadcasts, ZeroRedundancyOptimizer's. The LoopSync for
// run_training (loop.h) in ddp_verify's ranks, for every model.
#pragma once

#include <vector>

#include "src/comm/communicator.h"
#include "src/ddp/config.h"
#include "src/ddp/loop.h"

namespace ddplab::ddp {

// DDP's constructor: rank 0's parameters, then its buffers, to every rank.
void broadcast_model(comm::Communicator& comm, TrainingRank& rank);
// DDP's buffer broadcast from `root` (num_batches_tracked's int64 travels as its 8 bytes).
void broadcast_buffers(comm::Communicator& comm, TrainingRank& rank, int root);

// Lives as long as the LoopSync it makes (its bucket buffer).
class CommunicatorSync {
 public:
  CommunicatorSync(const Config& cfg, comm::Communicator& comm) : cfg_(cfg), comm_(comm) {}
  LoopSync sync(bool progress);

 private:
  const Config& cfg_;
  comm::Communicator& comm_;
  std::vector<float> buf_;
  int64_t step_ = 0, micro_ = 0;  // where the loop is (LoopSync::at), for comm_.context
  std::string where() const;      // "step 3: ", "step 3, micro-batch 1: "
};

}  // namespace ddplab::ddp
