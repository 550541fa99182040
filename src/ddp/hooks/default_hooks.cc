#include "src/ddp/hooks/default_hooks.h"

#include <type_traits>
#include <vector>

#include <fmt/format.h>

namespace ddplab::ddp {
namespace {

class AllreduceHook : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  HookReport run(GradBucket& b, comm::Communicator& comm) override {
    const auto ws = static_cast<float>(comm.world_size());
    for (size_t i = 0; i < b.numel; ++i) b.buffer[i] = b.buffer[i] / ws;  // tensor.div_(world_size)
    comm.all_reduce(b.buffer, b.numel, comm::ReduceOp::sum);
    return {fmt::format("float32 x {}", b.numel), b.numel * sizeof(float)};
  }
};

// fp16_compress_hook / bf16_compress_hook: compressed = buffer.to(T).div_(world_size); all_reduce(SUM);
// decompress: buffer.copy_(result), an exact widening.
template <class T>
class CompressHook : public CommHook {
 public:
  CompressHook(const char* name, const char* dtype) : name_(name), dtype_(dtype) {}
  std::string name() const override { return name_; }
  HookReport run(GradBucket& b, comm::Communicator& comm) override {
    compressed_.resize(b.numel);
    const T ws = convert(static_cast<float>(comm.world_size()));
    for (size_t i = 0; i < b.numel; ++i) compressed_[i] = convert(b.buffer[i]) / ws;
    comm.all_reduce(compressed_.data(), b.numel, comm::ReduceOp::sum);
    for (size_t i = 0; i < b.numel; ++i) b.buffer[i] = to_float(compressed_[i]);
    return {fmt::format("{} x {}", dtype_, b.numel), b.numel * sizeof(T)};
  }

 private:
  static T convert(float f) {
    if constexpr (std::is_same_v<T, Half>) {
      return to_half(f);
    } else {
      return to_bfloat16(f);
    }
  }
  const char* name_;
  const char* dtype_;
  std::vector<T> compressed_;
};

class NoopHook : public CommHook {
 public:
  std::string name() const override { return "noop"; }
  HookReport run(GradBucket&, comm::Communicator&) override { return {"nothing", 0}; }
};

}  // namespace

std::unique_ptr<CommHook> make_allreduce_hook() { return std::make_unique<AllreduceHook>(); }
std::unique_ptr<CommHook> make_fp16_compress_hook() {
  return std::make_unique<CompressHook<Half>>("fp16-compress", "float16");
}
std::unique_ptr<CommHook> make_bf16_compress_hook() {
  return std::make_unique<CompressHook<BFloat16>>("bf16-compress", "bfloat16");
}
std::unique_ptr<CommHook> make_noop_hook() { return std::make_unique<NoopHook>(); }

}  // namespace ddplab::ddp
