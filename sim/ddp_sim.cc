// bazel run //sim:ddp_sim -- N replicas of a DDP training run in one process, with PyTorch's semantics:
// broadcast at construction, buckets (rebuilt after iteration 0), grad * (1/world_size) then SUM
// all-reduce, DistributedSampler, no_sync. Ends with the notebook's cmp tables and why bits differ.
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "sim/gpt_sim.h"
#include "src/base/compare.h"
#include "src/ddp/config.h"
#include "src/ddp/join.h"
#include "src/ddp/trainer.h"
#include "src/ddp/zero.h"
#include "src/base/flags.h"
#include "src/gpt/train.h"
#include "src/base/io.h"
#include "src/base/parallel.h"
#include "src/report/explain.h"
#include "src/report/html_report.h"
#include "src/report/report.h"
#include "src/report/timeline.h"

namespace {

constexpr const char* kHead = R"(usage: ddp_sim [flags]
Simulates torch DistributedDataParallel with world_size replicas in one process: the MLP, a CNN, any
nn.Sequential spec, or a tiny GPT (--model gpt), with the same DDP flags.
)";
constexpr const char* kTail = R"(output:
  --compare-single-device true|false  also train one model on the union of the shards and compare [false]
  --explain                 show the all-reduce of one small gradient in --allreduce's order: who adds what,
                            the result against the rank-order sum, and every other order on the same values
                            (--model gpt: with --comm-hook, each bucket's result against the built-in average)
  --trace FILE              Chrome trace JSON of iterations 0 and 1 under the cost model below
  --link-latency-us A [5]   --link-gbps G [10]   --compute-gflops F [50]
  --dump-params FILE        final parameters per rank (state_dict names), sampler indices, losses (JSON)
  --report FILE.html        one self-contained HTML page: losses, cmp tables, buckets, the ring, the timeline
  --quiet                   no per-batch progress lines
)";

using namespace ddplab;

int run(int argc, char** argv) {
  auto known = ddp::config_flag_names();
  for (const char* f : {"compare-single-device", "explain", "trace", "link-latency-us", "link-gbps", "compute-gflops",
                        "dump-params", "quiet", "threads", "report"}) {
    known.insert(f);
  }
  const Flags flags(argc, argv, known, {"explain", "quiet", "seed-per-rank"});
  if (flags.help()) {
    std::printf("%s%s%s%s", kHead, ddp::config_usage(), threads_usage(), kTail);
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  ddp::Config cfg = ddp::config_from_flags(flags);
  cfg.threads = threads_from_flags(flags);
  if (cfg.is_gpt()) return run_gpt_sim(flags, cfg);
  const bool single = flags.get_bool("compare-single-device", false);
  const bool explain = flags.get_bool("explain", false);
  const bool quiet = flags.get_bool("quiet", false);
  const CostModel cost = cost_model_from_flags(flags);
  const std::string trace = flags.get_string("trace", "");
  const std::string dump = flags.get_string("dump-params", "");
  const std::string report_path = flags.get_string("report", "");
  for (const auto& [flag, path] :
       {std::pair{"--trace", trace}, std::pair{"--dump-params", dump}, std::pair{"--report", report_path}}) {
    if (!path.empty()) {
      if (std::string why = check_writable(path); !why.empty()) throw UsageError(std::string(flag) + ": " + why);
    }
  }

  cfg.compare_hook = explain || !report_path.empty();
  fmt::print("ddp_sim: {}\n{}", ddp::describe(cfg), ddp::describe_notes(cfg));
  std::string explanation;
  report::ReportData page;
  ddp::SimHooks hooks;
  if (explain || !report_path.empty()) {
    hooks.before_allreduce = [&](int64_t sync, size_t bucket, const std::vector<float*>& bufs, size_t n) {
      if (sync != 0 || bucket != 0) return;
      if (explain) explanation = explain_first_bucket(cfg, bufs, n);
      // The report draws the ring as a table of ranks: from 2 to 8 of them.
      if (!report_path.empty() && bufs.size() >= 2 && bufs.size() <= 8) page.ring = report::explain_data(cfg, bufs, n);
    };
  }
  const ddp::SimResult res = ddp::simulate(cfg, single, hooks);
  fmt::print("buckets at iteration 0: {}\n", res.buckets_first);
  if (const std::string j = ddp::join_summary(cfg); !j.empty()) fmt::print("{}\n", j);
  if (!quiet) {
    size_t next = 0;
    // the epochs that ran (training stops early on DDP's unused-parameter error)
    for (int64_t e = 0; e < static_cast<int64_t>(res.sampler_indices.size()); ++e) {
      // What DistributedSampler handed each rank this epoch (first 8 indices): set_epoch reshuffles.
      std::string line = fmt::format("epoch {} DistributedSampler:", e + 1);
      for (size_t r = 0; r < res.sampler_indices[static_cast<size_t>(e)].size(); ++r) {
        const auto& idx = res.sampler_indices[static_cast<size_t>(e)][r];
        const std::vector<int64_t> head(idx.begin(),
                                        idx.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(8, idx.size())));
        line += fmt::format(" rank{} [{}{}]", r, fmt::join(head, " "), idx.size() > 8 ? " ..." : "");
      }
      fmt::print("{}\n", line);
      for (; next < res.log.size() && res.log[next].epoch == e; ++next) {
        fmt::print("{}\n", ddp::progress_line(res.log[next], cfg.epochs));
      }
    }
  }
  if (!quiet && cfg.world_size > 1) {
    fmt::print("each rank's loss is the mean over its own batch: DistributedSampler hands every rank other samples (the "
               "lines above),\nso the losses differ; DDP averages the gradients, not the losses, and every rank then "
               "steps alike (the tables below)\n");
  }
  if (!quiet && !cfg.set_epoch && cfg.shuffle && cfg.epochs > 1) {
    fmt::print(
        "set_epoch was never called: DistributedSampler shuffles with seed + epoch and its epoch stays 0, so every "
        "epoch repeats\nepoch 1's order (the lines above): each rank meets the same batches in the same order every "
        "epoch, one\nfixed ordering instead of a reshuffle; sampler.set_epoch(epoch) before each epoch reshuffles\n");
  }
  if (res.buckets_rebuilt.empty()) {
    fmt::print("buckets never rebuilt: torch 1.13 keeps iteration 0's with find_unused_parameters=True\n");
  } else {
    fmt::print("buckets from iteration 1 (rebuilt in gradient-ready order, first bucket 1 MiB, cap {} MiB): {}\n",
               cfg.bucket_cap_mb, res.buckets_rebuilt);
  }
  for (const std::string& n : res.notes) fmt::print("{}\n", n);
  if (cfg.zero) {  // where the optimizer state lives, rank by rank
    std::vector<int64_t> state;
    for (const auto& rep : res.replicas) state.push_back(rep->optimizer->state_numel());
    const auto& zero = dynamic_cast<const ddp::ZeroRedundancyOptimizer&>(*res.replicas[0]->optimizer);
    fmt::print("\n{}", ddp::zero_block(zero.params(), zero.partition(), state));
  }
  if (!explanation.empty()) fmt::print("\n{}", explanation);
  std::string hook_table;
  if (!res.hook_reports.empty()) hook_table = ddp::format_hook_reports(cfg.comm_hook.name, res.hook_reports);
  if (!hook_table.empty()) fmt::print("\n{}", hook_table);
  const std::string tables = report_tables(cfg, res);
  fmt::print("\n{}", tables);

  if (!trace.empty()) {
    if (std::string why = write_trace(trace, cfg, cost); !why.empty()) {
      std::fprintf(stderr, "ddp_sim: --trace: %s\n", why.c_str());
      return 1;
    }
  }
  if (!dump.empty()) {
    if (std::string why = write_file_atomic(dump, dump_json(cfg, res)); !why.empty()) {
      std::fprintf(stderr, "ddp_sim: --dump-params: %s\n", why.c_str());
      return 1;
    }
  }
  if (!report_path.empty()) {
    page.program = "ddp_sim";
    page.title = fmt::format("{} simulated replicas of torch DistributedDataParallel in one process", cfg.world_size);
    page.argv.assign(argv, argv + argc);
    page.config = ddp::describe(cfg);
    report::add_simulation(page, cfg, res);
    page.notes.push_back(tables);
    if (!hook_table.empty()) page.notes.push_back(hook_table);
    page.timing = report::timing_of(build_timeline(cfg, cost), cfg.world_size);
    if (std::string why = write_file_atomic(report_path, report::render_html(page)); !why.empty()) {
      std::fprintf(stderr, "ddp_sim: --report: %s\n", why.c_str());
      return 1;
    }
  }
  if (res.error) {  // torch raised here: the tables above are the state it stopped in
    std::fprintf(stderr, "ddp_sim: RuntimeError at %s\n", ddp::unfinished_reduction_message(*res.error).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("ddp_sim", argc, argv, run); }
