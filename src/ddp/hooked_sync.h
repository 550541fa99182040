// The simulator's synchronised backward when a communication hook is registered. A hook may issue several
// collectives per bucket and keeps state per rank (PowerSGD's error feedback and Q), so each simulated
// rank runs its own hook on a thread of its own, as a real rank would, and their collectives meet in a
// comm::LocalGroup whose all-reduce is the in-process algorithm (Gloo's ring by default): the bits of the
// Gloo verifier's ranks. Without a hook the simulator keeps InProcessAllreduce's block-by-block path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "src/collective/allreduce.h"
#include "src/comm/local_group.h"
#include "src/ddp/comm_hook.h"
#include "src/ddp/reducer.h"

namespace ddplab::ddp {

class HookedAllreduce {
 public:
  HookedAllreduce(int world_size, collective::Algorithm algorithm);
  // Every rank's first `num_buckets` buckets through its reducer's hook (bucket_sync.h's hook_buckets).
  // Returns rank 0's reports, one per bucket. An error on any rank is rethrown here.
  std::vector<HookReport> run(const std::vector<Reducer*>& reducers, size_t num_buckets = SIZE_MAX);

 private:
  comm::LocalGroup group_;
  std::vector<std::unique_ptr<comm::Communicator>> comms_;
  std::vector<std::vector<float>> buffers_;
};

}  // namespace ddplab::ddp
