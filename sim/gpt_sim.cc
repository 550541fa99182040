#include "sim/gpt_sim.h"

#include <cstdio>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "src/ddp/join.h"
#include "src/ddp/zero.h"
#include "src/base/flags.h"
#include "src/report/gpt_output.h"
#include "src/report/timeline.h"
#include "src/gpt/train.h"
#include "src/base/io.h"

namespace ddplab {

int run_gpt_sim(const Flags& flags, ddp::Config cfg) {
  for (const char* f : {"compare-single-device", "report"}) {
    if (flags.has(f)) throw UsageError(fmt::format("--{} does not apply to --model gpt (the sequential models' output)", f));
  }
  cfg.compare_hook = flags.get_bool("explain", false);
  const std::string dump = flags.get_string("dump-params", "");
  const std::string trace = flags.get_string("trace", "");
  const CostModel cost = cost_model_from_flags(flags);
  for (const auto& [flag, path] : {std::pair{"--dump-params", dump}, std::pair{"--trace", trace}}) {
    if (path.empty()) continue;
    if (std::string why = check_writable(path); !why.empty()) throw UsageError(std::string(flag) + ": " + why);
  }
  const TextData data = TextData::load(cfg.data);
  data.check_batch_shape(cfg.batch_size, cfg.gpt.block_size);
  cfg.gpt.vocab_size = data.vocab_size();
  fmt::print("ddp_sim: {}\n{}", ddp::describe(cfg), ddp::describe_notes(cfg));
  fmt::print("data: {} (vocabulary of {} bytes; train {} tokens, val {})\n", cfg.data, data.vocab_size(),
             data.tokens(Split::kTrain).size(), data.tokens(Split::kVal).size());
  const gpt::GptSimResult res = gpt::simulate_gpt(cfg, data);
  fmt::print("buckets at iteration 0 (model order): {}\n", report::short_names(res.buckets_first));
  if (!res.buckets_rebuilt.empty()) {
    fmt::print("buckets from iteration 1 (rebuilt in gradient-ready order; the tied wte is ready last): {}\n",
               report::short_names(res.buckets_rebuilt));
  } else if (cfg.find_unused_parameters) {
    fmt::print("buckets never rebuilt: torch 1.13 keeps iteration 0's with find_unused_parameters=True\n");
  }
  if (const std::string j = ddp::join_summary(cfg); !j.empty()) fmt::print("{}\n", j);
  std::vector<report::RankRecord> ranks;
  for (const auto& r : res.ranks) ranks.push_back(report::record_of(*r));
  if (!flags.get_bool("quiet", false)) {  // as ddp_verify --model gpt: no per-step lines nor cmp tables
    fmt::print("{}", report::gpt_summary(cfg, ranks));
    for (const std::string& n : res.notes) fmt::print("{}\n", n);
  }
  if (cfg.zero) {  // where the optimizer state lives, rank by rank
    std::vector<int64_t> state;
    for (const auto& r : res.ranks) state.push_back(r->optimizer->state_numel());
    const auto& zero = dynamic_cast<const ddp::ZeroRedundancyOptimizer&>(*res.ranks[0]->optimizer);
    fmt::print("\n{}", ddp::zero_block(zero.params(), zero.partition(), state));
  }
  if (!res.hook_reports.empty()) fmt::print("\n{}", ddp::format_hook_reports(cfg.comm_hook.name, res.hook_reports));
  const std::string error = res.error ? gpt::unfinished_reduction_message(*res.error) : "";
  if (!dump.empty()) {
    if (std::string why = write_file_atomic(dump, report::gpt_dump_json(cfg, ranks, "", error)); !why.empty()) {
      std::fprintf(stderr, "ddp_sim: --dump-params: %s\n", why.c_str());
      return 1;
    }
  }
  if (!trace.empty()) {
    if (std::string why = write_trace(trace, cfg, cost); !why.empty()) {
      std::fprintf(stderr, "ddp_sim: --trace: %s\n", why.c_str());
      return 1;
    }
  }
  if (res.error) {
    std::fprintf(stderr, "ddp_sim: RuntimeError at %s\n", error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace ddplab
