#include "src/ddp/join.h"

#include <vector>

#include <fmt/format.h>

#include "src/base/errors.h"

namespace ddplab::ddp {

int64_t rank_batches(const Config& cfg, int64_t rank) { return cfg.batches_per_epoch() - cfg.uneven * rank; }

int64_t active_ranks(const Config& cfg, int64_t b) {
  int64_t n = 0;
  for (int64_t r = 0; r < cfg.world_size; ++r) n += b < rank_batches(cfg, r);
  return n;
}

int64_t buffer_source(const Config& cfg, int64_t b) {
  if (!cfg.join) return 0;
  for (int64_t r = cfg.world_size - 1; r > 0; --r) {
    if (b < rank_batches(cfg, r)) return r;
  }
  return 0;
}

int64_t authoritative_rank(const Config& cfg) {
  int64_t best = 0;
  for (int64_t r = 1; r < cfg.world_size; ++r) {
    if (rank_batches(cfg, r) >= rank_batches(cfg, best)) best = r;  // ties: the larger rank
  }
  return best;
}

void validate_uneven(const Config& c) {
  const int64_t B = c.batches_per_epoch();
  if (c.uneven > 0 && c.world_size > 1 && rank_batches(c, c.world_size - 1) < 1) {
    throw UsageError(
        fmt::format("--uneven {} leaves rank {} with {} - {}*{} = {} of its {} batches per epoch: every rank needs one "
                    "(at most --uneven {} at --world-size {})",
                    c.uneven, c.world_size - 1, B, c.uneven, c.world_size - 1, rank_batches(c, c.world_size - 1), B,
                    (B - 1) / (c.world_size - 1), c.world_size));
  }
  if ((c.uneven > 0 || c.join) && c.no_sync > 1) {
    throw UsageError(
        fmt::format("--uneven and --join are modelled with --no-sync 1 only (got --no-sync {})", c.no_sync));
  }
  if (c.join && c.average != Average::predivide) {
    throw UsageError("--join follows DDP's predivide (grad * 1/divisor, then SUM): it takes --average predivide only");
  }
  if (c.join && c.find_unused_parameters) {
    throw UsageError(
        "--join with --find-unused-parameters true is not modelled (a joined rank's share of the used-parameter map "
        "is not measured): use one or the other");
  }
  if (c.join_divide_active && !c.join) throw UsageError("--join-divide active takes effect only with --join true");
  if (c.join_scope == JoinScope::run && !c.join) throw UsageError("--join-scope run takes effect only with --join true");
}

std::string no_join_line(const Config& cfg, int64_t epoch, int64_t b, const Reducer& layout) {
  std::vector<int64_t> out, waiting;
  for (int64_t r = 0; r < cfg.world_size; ++r) (b < rank_batches(cfg, r) ? waiting : out).push_back(r);
  const Bucket& first = layout.bucket(0);
  std::vector<std::string> names;
  for (size_t i = 0; i < first.params.size() && i < 4; ++i) names.push_back(layout.param_name(first.params[i]));
  if (first.params.size() > 4) names.push_back("...");
  return fmt::format(
      "uneven inputs without Join: at epoch {}, batch {} (0-based), rank{} {} ran out of batches (rank r has {} - "
      "{}*r per epoch) and never reach{} bucket 0's all-reduce (of {}: [{}] {} floats); rank{} {} block{} in it: "
      "PyTorch's gloo raises \"Timed out waiting <timeout>ms for recv operation to complete\" after the process "
      "group's timeout (30 min by default), or \"Connection closed by peer\" at once if the short rank's process "
      "has exited; --join true shadows the all-reduces with zeros",
      epoch, b, out.size() > 1 ? "s" : "", fmt::join(out, ","), cfg.batches_per_epoch(), cfg.uneven,
      out.size() > 1 ? "" : "es", layout.num_buckets(), fmt::join(names, " "), first.numel,
      waiting.size() > 1 ? "s" : "", fmt::join(waiting, ","), waiting.size() > 1 ? "" : "s");
}

std::string join_summary(const Config& cfg) {
  if (cfg.uneven == 0 && !cfg.join) return "";
  std::vector<int64_t> counts;
  for (int64_t r = 0; r < cfg.world_size; ++r) counts.push_back(rank_batches(cfg, r));
  std::string s = fmt::format("uneven inputs: {} per rank{} [{}] of {}", cfg.is_gpt() ? "optimizer steps" : "batches",
                              cfg.is_gpt() ? "" : " and epoch", fmt::join(counts, ", "), cfg.batches_per_epoch());
  if (!cfg.join) return s + "; no Join: the run stops where a rank runs out";
  return s + fmt::format(
                 "; Join: a rank out of batches shadows every bucket all-reduce with zeros and does not step, the "
                 "others predivide by {} (divide_by_initial_world_size={}); DDP's buffer broadcast comes from the "
                 "highest active rank; {} rank {} (the highest of the last joiners) broadcasts its parameters and "
                 "buffers",
                 cfg.comm_hook.name != "none" ? "the hook's own division by the world size"
                 : cfg.join_divide_active     ? "the ranks still active"
                                              : "the world size",
                 cfg.join_divide_active ? "False" : "True",
                 cfg.join_scope == JoinScope::run ? "one Join around all epochs: after the last epoch"
                                                  : "after each epoch",
                 authoritative_rank(cfg));
}

}  // namespace ddplab::ddp
