#include "src/ddp/hooked_sync.h"

#include <algorithm>
#include <exception>
#include <thread>

#include "src/ddp/bucket_sync.h"

namespace ddplab::ddp {

HookedAllreduce::HookedAllreduce(int world_size, collective::Algorithm algorithm) : group_(world_size, algorithm) {
  for (int r = 0; r < world_size; ++r) comms_.push_back(group_.communicator(r));
  buffers_.resize(static_cast<size_t>(world_size));
}

std::vector<HookReport> HookedAllreduce::run(const std::vector<Reducer*>& reducers, size_t num_buckets) {
  const size_t n = reducers.size();
  std::vector<std::vector<HookReport>> reports(n);
  std::vector<std::exception_ptr> errors(n);
  const auto one = [&](size_t r) {
    try {
      buffers_[r].resize(std::max(buffers_[r].size(), reducers[r]->max_bucket_numel()));
      reports[r] = hook_buckets(*reducers[r], *comms_[r], buffers_[r].data(), num_buckets);
    } catch (...) {
      errors[r] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t r = 1; r < n; ++r) threads.emplace_back(one, r);
  one(0);
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return reports[0];
}

}  // namespace ddplab::ddp
