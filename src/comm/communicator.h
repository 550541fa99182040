// The one interface the DDP step talks to: all_reduce, broadcast, all_gather, barrier, each bounded by a
// timeout. Implementations: LocalGroup (threads in one process, the simulator's algorithms), Gloo (CPU
// processes over TCP, verify/) and NCCL (GPUs, verify/).
#pragma once

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/collective/half.h"
#include "src/base/errors.h"

namespace ddplab::comm {

enum class ReduceOp { sum, avg };

// A collective that failed or timed out. The message names the collective, its sequence number and,
// when known, the ranks that never arrived at it.
struct CommError : RunError {
  using RunError::RunError;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;
  // True when the backend reduces with AVG itself (NCCL's ncclAvg); otherwise callers pre-divide.
  virtual bool native_avg() const { return false; }

  // In place, on n floats. SUM adds in the backend's own order (Gloo: its ring; see collective/ring.h).
  virtual void all_reduce(float* data, size_t n, ReduceOp op) = 0;
  // The same on 16-bit values, for communication hooks: SUM rounds to the type at every addition, in the
  // backend's order. A backend without the type throws CommError naming it (the default).
  virtual void all_reduce(Half* data, size_t n, ReduceOp op);
  virtual void all_reduce(BFloat16* data, size_t n, ReduceOp op);
  virtual void broadcast(float* data, size_t n, int root) = 0;
  // Every rank contributes `bytes` bytes; out receives world_size * bytes, rank order.
  virtual void all_gather(const void* in, size_t bytes, void* out) = 0;
  virtual void barrier() = 0;

  // Device-resident collectives (the NCCL backend): `dev` points at n floats in this rank's GPU memory and
  // is reduced in place with no host staging; each call returns once the collective has finished, waiting
  // at most `timeout` (a dead or hung peer becomes a CommError, never a hang). Backends whose buffers live
  // on the host (LocalGroup, Gloo) say no.
  virtual bool device_resident() const { return false; }
  virtual void all_reduce_device(float* dev, size_t n, ReduceOp op);
  virtual void broadcast_device(float* dev, size_t n, int root);
  // The cudaStream_t (as void*) the device collectives run on: a trainer that enqueues its kernels on the
  // same stream needs no extra synchronisation between compute and communication.
  virtual void* device_stream() { return nullptr; }

  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  // What the caller is doing, in the learner's terms ("step 2: bucket 0's all-reduce"), set before each
  // collective by the training loop. Backends name it in their errors and the fault injector in its line, so
  // that a failure and every survivor's report name one collective alike. Empty: the sequence number only.
  std::string context;
};

// How an error names a collective: "step 2: bucket 0's all-reduce (all_reduce #40 on this rank)", or
// "all_reduce #40" without a context.
std::string collective_label(const std::string& name, uint64_t seq, const std::string& context);

// all_gather of strings of any length (lengths first, then padded payloads).
std::vector<std::string> all_gather_strings(Communicator& c, const std::string& mine);
// Every rank's floats, as all_gather_strings gathers their bytes (lengths may differ): index r holds rank r's.
std::vector<std::vector<float>> all_gather_floats(Communicator& c, const std::vector<float>& mine);

}  // namespace ddplab::comm
