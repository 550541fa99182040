// Threads for the simulator: the replicas are independent between all-reduces, so each can run on its
// own core while every GEMM inside stays single-threaded (PyTorch's calls, PyTorch's order). Work is
// split only where the pieces write disjoint memory and no float is added in a different order, so the
// results are bit for bit those of one thread, whatever the thread count.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "src/base/flags.h"

namespace ddplab {

// The cores this process may run on (sched_getaffinity; at least 1).
int available_cores();

// --threads N (1..256; 0 or absent: every available core). Throws UsageError naming the limit.
int threads_from_flags(const Flags& flags);
const char* threads_usage();

// A fixed set of workers; the calling thread works too. run(n, fn) calls fn(0) .. fn(n-1), each once,
// spread over the threads, and returns when all are done (the first exception thrown is rethrown).
class ThreadPool {
 public:
  // threads <= 1: no workers, run() is a plain loop. Workers start on the first run() that has work for
  // them: a process that never needs them stays single-threaded (glibc's malloc is faster then).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }
  void run(size_t n, const std::function<void(size_t)>& fn);

 private:
  void drain();
  void start();

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t n_ = 0, next_ = 0, finished_ = 0, generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

// Runs fn(i) for i < n on `pool`, or inline when pool is null or the work is too small to be worth a
// wake-up (`work` is an estimate of the floats touched or flops per item).
void parallel_for(ThreadPool* pool, size_t n, double work, const std::function<void(size_t)>& fn);

// Runs fn(i) for i < n all at once, each on its own thread (the caller's is one): for work items that meet
// each other inside (the simulator's ranks in SyncBatchNorm's collectives), which a pool smaller than n would
// deadlock. The first exception thrown is rethrown once all have returned.
void run_concurrently(size_t n, const std::function<void(size_t)>& fn);

}  // namespace ddplab
