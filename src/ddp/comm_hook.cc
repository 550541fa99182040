#include "src/ddp/comm_hook.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "src/base/compare.h"
#include "src/ddp/hooks/default_hooks.h"
#include "src/ddp/hooks/powersgd.h"

namespace ddplab::ddp {

const std::vector<std::string>& comm_hook_names() {
  static const std::vector<std::string> names = {"none",          "allreduce", "fp16-compress",
                                                 "bf16-compress", "powersgd",  "noop"};
  return names;
}

void read_comm_hook_flags(const Flags& f, CommHookOptions& o) {
  o.name = f.get_choice("comm-hook", o.name, comm_hook_names());
  o.powersgd_rank = f.get_int("powersgd-rank", o.powersgd_rank, 1, 2);
  o.powersgd_start_iter = f.get_int("powersgd-start-iter", o.powersgd_start_iter, 2, int64_t{1} << 40);
}

const char* comm_hook_usage() {
  return "  --comm-hook none|allreduce|fp16-compress|bf16-compress|powersgd|noop  DDP.register_comm_hook: none keeps "
         "the\n"
         "                            built-in grad*(1/ws) then SUM; allreduce_hook divides then sums; "
         "fp16/bf16_compress_hook\n"
         "                            send 16-bit values; powerSGD_hook sends low-rank P and Q; noop_hook sends "
         "nothing [none]\n"
         "  --powersgd-rank R         PowerSGDState's matrix_approximation_rank, 1..2 [1]  --powersgd-start-iter I  "
         "start_powerSGD_iter, >= 2 [2]\n";
}

std::string describe(const CommHookOptions& o) {
  if (o.name == "powersgd") {
    return fmt::format("comm_hook=powersgd rank={} start_iter={}", o.powersgd_rank, o.powersgd_start_iter);
  }
  return o.name == "none" ? "" : "comm_hook=" + o.name;
}

std::unique_ptr<CommHook> make_comm_hook(const CommHookOptions& o) {
  if (o.name == "none") return nullptr;
  if (o.name == "allreduce") return make_allreduce_hook();
  if (o.name == "fp16-compress") return make_fp16_compress_hook();
  if (o.name == "bf16-compress") return make_bf16_compress_hook();
  if (o.name == "powersgd") return make_powersgd_hook(o);
  if (o.name == "noop") return make_noop_hook();
  throw std::invalid_argument("unknown --comm-hook '" + o.name + "'");
}

std::string format_hook_reports(const std::string& hook, const std::vector<std::vector<HookReport>>& steps) {
  constexpr size_t kHead = 4;  // steps shown before the last one
  std::string out = fmt::format(
      "comm hook {}: what rank 0 sent per bucket, and how its average differs from the "
      "built-in grad*(1/ws) then SUM\n",
      hook);
  out += fmt::format("  {:>5} {:>6}  {:<36} {:>10}  {:>22} {:>10} {:>11}\n", "step", "bucket", "sent", "bytes",
                     "differ from built-in", "max |diff|", "max ulps");
  for (size_t s = 0; s < steps.size(); ++s) {
    if (s == kHead && steps.size() > kHead + 1) {
      out += fmt::format("  {:>5} ({} more steps)\n", "...", steps.size() - kHead - 1);
      s = steps.size() - 1;
    }
    for (size_t b = 0; b < steps[s].size(); ++b) {
      const HookReport& r = steps[s][b];
      const std::string differ = r.differ < 0 ? "(--explain)" : fmt::format("{} of {}", r.differ, r.numel);
      const std::string diff = r.differ < 0 ? "" : fmt::format("{:.3g}", r.max_abs_diff);
      const std::string ulps = r.differ < 0 ? "" : std::to_string(r.max_ulps);
      out += fmt::format("  {:>5} {:>6}  {:<36} {:>10}  {:>22} {:>10} {:>11}{}\n", s, b, r.sent, r.bytes, differ, diff,
                         ulps, r.nonfinite ? fmt::format("  ({} inf/NaN)", r.nonfinite) : "");
    }
  }
  int64_t most = 0;
  for (const auto& step : steps) {
    for (const HookReport& r : step) most = std::max(most, r.max_ulps);
  }
  if (most >= (int64_t{1} << 20)) {  // a value near zero, or two on either side of it
    out += fmt::format(
        "  max ulps counts the float32 values between the two results: near zero they are dense (about 9e8 of "
        "them lie\n  between 0 and 1e-6), and two results on either side of zero are as many apart as both "
        "magnitudes\n  together, so {} ulps can be a tiny |diff|: read it beside max |diff|\n",
        most);
  }
  return out;
}

namespace {

class Compared : public CommHook {
 public:
  explicit Compared(std::unique_ptr<CommHook> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  HookReport run(GradBucket& b, comm::Communicator& comm) override {
    builtin_.assign(b.buffer, b.buffer + b.numel);
    HookReport r = inner_->run(b, comm);
    // Reducer's built-in path on the same raw gradients: at::mul_out(bucket, grad, 1.0 / world_size), SUM.
    const auto scale = static_cast<float>(1.0 / static_cast<double>(comm.world_size()));
    for (float& v : builtin_) v = v * scale;
    comm.all_reduce(builtin_.data(), b.numel, comm::ReduceOp::sum);
    r.differ = r.max_ulps = r.nonfinite = 0;
    for (size_t i = 0; i < b.numel; ++i) {
      const float got = b.buffer[i];
      if (!std::isfinite(got)) ++r.nonfinite;
      if (float_bits(got) == float_bits(builtin_[i])) continue;
      ++r.differ;
      if (!std::isfinite(got)) continue;
      r.max_ulps = std::max(r.max_ulps, ulp_distance(got, builtin_[i]));
      r.max_abs_diff = std::max(r.max_abs_diff, std::fabs(got - builtin_[i]));
    }
    return r;
  }

 private:
  std::unique_ptr<CommHook> inner_;
  std::vector<float> builtin_;
};

}  // namespace

std::unique_ptr<CommHook> compared_to_builtin(std::unique_ptr<CommHook> inner) {
  return std::make_unique<Compared>(std::move(inner));
}

}  // namespace ddplab::ddp
