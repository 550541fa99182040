// Fault injection for the verifier's tests: one rank exits or hangs at its K-th all-reduce, so the tests
// can show that the others stop within --timeout, name the rank, and that nothing hangs.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "src/comm/communicator.h"
#include "src/launch/run_flags.h"

namespace ddplab::dist {

class FaultyComm : public comm::Communicator {
 public:
  FaultyComm(std::unique_ptr<comm::Communicator> inner, Fault fault, int at)
      : inner_(std::move(inner)), fault_(fault), at_(at) {
    timeout = inner_->timeout;
  }
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string backend() const override { return inner_->backend(); }
  bool native_avg() const override { return inner_->native_avg(); }
  // Every call hands the caller's context on, so that the backend's errors name what this rank was doing.
  void all_reduce(float* d, size_t n, comm::ReduceOp op) override {
    maybe_fail();
    pass()->all_reduce(d, n, op);
  }
  void all_reduce(Half* d, size_t n, comm::ReduceOp op) override { pass()->all_reduce(d, n, op); }
  void all_reduce(BFloat16* d, size_t n, comm::ReduceOp op) override { pass()->all_reduce(d, n, op); }
  void broadcast(float* d, size_t n, int root) override { pass()->broadcast(d, n, root); }
  bool device_resident() const override { return inner_->device_resident(); }
  void all_reduce_device(float* d, size_t n, comm::ReduceOp op) override {
    maybe_fail();
    pass()->all_reduce_device(d, n, op);
  }
  void broadcast_device(float* d, size_t n, int root) override { pass()->broadcast_device(d, n, root); }
  void* device_stream() override { return inner_->device_stream(); }
  void all_gather(const void* in, size_t bytes, void* out) override { pass()->all_gather(in, bytes, out); }
  void barrier() override { pass()->barrier(); }

  // After the run: "" when the fault was injected (it never returns then), else why it was not.
  std::string not_injected() const {
    return "--fault-at " + std::to_string(at_) + " is past this run's last all-reduce (#" + std::to_string(count_) +
           "): no fault was injected";
  }

 private:
  comm::Communicator* pass() {
    inner_->context = context;
    inner_->timeout = timeout;
    return inner_.get();
  }
  // Host and device all-reduces count alike: --fault-at K is the K-th float all-reduce either way. The line
  // names the collective as the survivors' errors name it (the context), then the count.
  void maybe_fail() {
    if (++count_ != at_) return;
    const std::string what = context.empty() ? "its all-reduce" : context;
    std::fprintf(stderr, "rank %d: injected fault: %s at %s (--fault-at %d: this rank's all-reduce #%d)\n", rank(),
                 fault_name(fault_).c_str(), what.c_str(), at_, at_);
    std::fflush(stderr);
    if (fault_ == Fault::exit) _exit(1);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));  // hang: only a kill ends this
  }

  std::unique_ptr<comm::Communicator> inner_;
  Fault fault_;
  int at_, count_ = 0;
};

}  // namespace ddplab::dist
