#include "src/base/parallel.h"

#include <sched.h>

#include <algorithm>

namespace ddplab {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int threads_from_flags(const Flags& flags) {
  const int64_t t = flags.get_int("threads", 0, 0, 256);
  return t == 0 ? available_cores() : static_cast<int>(t);
}

const char* threads_usage() {
  return "  --threads N               simulator threads, 1..256 (0: every core); replicas run side by side,\n"
         "                            each GEMM on one thread: the results are the same bit for bit for any N [0]\n";
}

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {}

void ThreadPool::start() {
  for (int i = 1; i < threads_; ++i) {
    workers_.emplace_back([this] {
      size_t seen = 0;
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(mu_);
          wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
          if (stop_) return;
          seen = generation_;
        }
        drain();
      }
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

// Takes items until none is left; the last one to finish an item wakes run().
void ThreadPool::drain() {
  for (;;) {
    size_t i;
    const std::function<void(size_t)>* fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_ >= n_) return;
      i = next_++;
      fn = fn_;
    }
    std::exception_ptr err;
    try {
      (*fn)(i);
    } catch (...) {
      err = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (err && !error_) error_ = err;
    if (++finished_ == n_) done_.notify_all();
  }
}

void ThreadPool::run(size_t n, const std::function<void(size_t)>& fn) {
  if (threads_ == 1 || n <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  if (workers_.empty()) start();
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_ = finished_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  drain();
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return finished_ == n_; });
  n_ = 0;  // a late worker finds nothing to take
  if (error_) std::rethrow_exception(error_);
}

void parallel_for(ThreadPool* pool, size_t n, double work, const std::function<void(size_t)>& fn) {
  // Waking a worker costs a few microseconds: below ~100k floats or flops per item it does not pay.
  constexpr double kMinWork = 1e5;
  if (pool == nullptr || pool->size() == 1 || n <= 1 || work < kMinWork) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  pool->run(n, fn);
}

void run_concurrently(size_t n, const std::function<void(size_t)>& fn) {
  std::vector<std::exception_ptr> errors(n);
  auto one = [&](size_t i) {
    try {
      fn(i);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i) threads.emplace_back(one, i);
  if (n > 0) one(0);
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace ddplab
