#include "src/comm/local_group.h"

#include <cstring>
#include <string>

#include <fmt/format.h>

namespace ddplab::comm {

class LocalComm : public Communicator {
 public:
  LocalComm(LocalGroup& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return g_.world_size_; }
  std::string backend() const override { return "local"; }

  void all_reduce(float* data, size_t n, ReduceOp op) override {
    g_.collective(rank_, "all_reduce", data, timeout, [&](std::vector<void*>& slots) {
      std::vector<float*> bufs;
      for (void* s : slots) bufs.push_back(static_cast<float*>(s));
      if (op == ReduceOp::avg) {  // as ncclAvg does for floats: pre-multiply by float(1/n), then sum
        const float scale = static_cast<float>(1.0 / static_cast<double>(bufs.size()));
        for (float* b : bufs) {
          for (size_t i = 0; i < n; ++i) b[i] = b[i] * scale;
        }
      }
      collective::allreduce_sum(g_.algorithm_, bufs, n);
    });
  }
  // 16-bit SUM: the group's algorithm on halves, every addition rounded to the type (collective/allreduce.h).
  // AVG throws: the hooks pre-divide in the 16-bit type themselves, as fp16_compress_hook does.
  void all_reduce(Half* data, size_t n, ReduceOp op) override { all_reduce_16(data, n, op, "float16"); }
  void all_reduce(BFloat16* data, size_t n, ReduceOp op) override { all_reduce_16(data, n, op, "bfloat16"); }
  void broadcast(float* data, size_t n, int root) override {
    g_.collective(rank_, "broadcast", data, timeout, [&](std::vector<void*>& slots) {
      for (size_t r = 0; r < slots.size(); ++r) {
        if (static_cast<int>(r) != root) std::memcpy(slots[r], slots[static_cast<size_t>(root)], n * sizeof(float));
      }
    });
  }
  void all_gather(const void* in, size_t bytes, void* out) override {
    struct Io {
      const void* in;
      void* out;
    } io{in, out};
    g_.collective(rank_, "all_gather", &io, timeout, [&](std::vector<void*>& slots) {
      for (void* dst : slots) {
        for (size_t r = 0; r < slots.size(); ++r) {
          std::memcpy(static_cast<char*>(static_cast<Io*>(dst)->out) + r * bytes, static_cast<Io*>(slots[r])->in,
                      bytes);
        }
      }
    });
  }
  void barrier() override {
    g_.collective(rank_, "barrier", nullptr, timeout, [](std::vector<void*>&) {});
  }

 private:
  template <typename T>
  void all_reduce_16(T* data, size_t n, ReduceOp op, const char* type) {
    if (op == ReduceOp::avg) {
      throw CommError(fmt::format("rank {}: local backend has no {} AVG all_reduce: pre-divide and SUM", rank_, type));
    }
    g_.collective(rank_, "all_reduce", data, timeout, [&](std::vector<void*>& slots) {
      std::vector<T*> bufs;
      for (void* s : slots) bufs.push_back(static_cast<T*>(s));
      collective::allreduce_sum(g_.algorithm_, bufs, n);
    });
  }

  LocalGroup& g_;
  int rank_;
};

LocalGroup::LocalGroup(int world_size, collective::Algorithm algorithm)
    : world_size_(world_size), algorithm_(algorithm), slots_(static_cast<size_t>(world_size)) {}

std::unique_ptr<Communicator> LocalGroup::communicator(int rank) { return std::make_unique<LocalComm>(*this, rank); }

template <typename Op>
void LocalGroup::collective(int rank, const char* name, void* buf, std::chrono::milliseconds timeout, Op op) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.empty()) throw CommError(fmt::format("rank {}: {} #{} refused: {}", rank, name, seq_, broken_));
  const uint64_t gen = generation_;
  slots_[static_cast<size_t>(rank)] = buf;
  if (++arrived_ == world_size_) {
    op(slots_);  // everyone's buffer is here: run the collective, release the others
    arrived_ = 0;
    ++generation_;
    ++seq_;
    cv_.notify_all();
    return;
  }
  if (!cv_.wait_for(lock, timeout, [&] { return generation_ != gen || !broken_.empty(); })) {
    broken_ = fmt::format("{} #{} timed out after {} ms on rank {}", name, seq_, timeout.count(), rank);
    cv_.notify_all();
    throw CommError(fmt::format("rank {}: {} #{} timed out after {} ms: only {} of {} ranks arrived", rank, name, seq_,
                                timeout.count(), arrived_, world_size_));
  }
  if (generation_ == gen) throw CommError(fmt::format("rank {}: {} #{} abandoned: {}", rank, name, seq_, broken_));
}

}  // namespace ddplab::comm
