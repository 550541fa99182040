// nn.SyncBatchNorm's process group over a comm::Communicator: a real rank's (ddp_verify) or one rank of a
// comm::LocalGroup (the simulator, whose ranks then run side by side: LoopSync::lockstep). Its collectives
// are the ones torch's SyncBatchNorm makes: all_gather of [mean, invstd, count] in the forward, all_reduce
// (SUM) of [sum_dy, sum_dy_xmu] in the backward, each bounded by the communicator's timeout.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "src/comm/communicator.h"
#include "src/comm/local_group.h"
#include "src/model/norm.h"

namespace ddplab::ddp {

class CommunicatorGroup : public ProcessGroup {
 public:
  explicit CommunicatorGroup(comm::Communicator& c) : c_(c) {}
  int world_size() const override { return c_.world_size(); }
  void all_gather(const float* in, size_t n, float* out) override {
    c_.context = "SyncBatchNorm's all_gather of each rank's mean, invstd and count";
    c_.all_gather(in, n * sizeof(float), out);
  }
  void all_reduce_sum(float* data, size_t n) override {
    c_.context = "SyncBatchNorm's all_reduce of sum_dy and sum_dy_xmu";
    c_.all_reduce(data, n, comm::ReduceOp::sum);
  }

 private:
  comm::Communicator& c_;
};

// The simulator's world for SyncBatchNorm: a LocalGroup and one group per rank.
struct LocalSyncBatchNorm {
  LocalSyncBatchNorm(int world_size, collective::Algorithm algorithm) : local(world_size, algorithm) {
    for (int r = 0; r < world_size; ++r) {
      comms.push_back(local.communicator(r));
      groups.push_back(std::make_unique<CommunicatorGroup>(*comms.back()));
    }
  }
  comm::LocalGroup local;
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  std::vector<std::unique_ptr<CommunicatorGroup>> groups;
};

}  // namespace ddplab::ddp
