// A communicator for ranks that are threads of one process: every collective waits (up to the timeout)
// until all ranks have arrived, then the last one to arrive runs the simulator's algorithm over everyone's
// buffer. The arithmetic is the in-process algorithms' (collective/), so results equal ddp_sim's.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/collective/allreduce.h"
#include "src/comm/communicator.h"

namespace ddplab::comm {

class LocalGroup {
 public:
  LocalGroup(int world_size, collective::Algorithm algorithm);
  // The communicator of rank r; the group must outlive it.
  std::unique_ptr<Communicator> communicator(int rank);

 private:
  friend class LocalComm;
  // Rendezvous of one collective: each rank deposits its buffer; the last arrival runs `op` on all.
  template <typename Op>
  void collective(int rank, const char* name, void* buf, std::chrono::milliseconds timeout, Op op);

  int world_size_;
  collective::Algorithm algorithm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<void*> slots_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  uint64_t seq_ = 0;
  std::string broken_;  // set by the first timeout: later collectives fail at once instead of mis-pairing
};

}  // namespace ddplab::comm
