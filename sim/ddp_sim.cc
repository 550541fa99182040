// bazel run //sim:ddp_sim -- N replicas of a DDP training run in one process, with PyTorch's semantics:
// broadcast at construction, buckets (rebuilt after iteration 0), grad * (1/world_size) then SUM
// all-reduce, DistributedSampler, no_sync. Ends with the notebook's cmp tables and why bits differ.
#include <cstdio>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "src/base/compare.h"
#include "src/ddp/config.h"
#include "src/ddp/join.h"
#include "src/ddp/trainer.h"
#include "src/ddp/zero.h"
#include "src/base/flags.h"
#include "src/gpt/train.h"
#include "src/report/gpt_output.h"
#include "src/report/hand_sync.h"
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

// --zero: where the optimizer state lives, rank by rank (any model: the ranks' optimizers).
template <class Rank>
void print_zero(const ddp::Config& cfg, const std::vector<std::unique_ptr<Rank>>& ranks) {
  if (!cfg.zero) return;
  std::vector<int64_t> state;
  for (const auto& r : ranks) state.push_back(r->optimizer->state_numel());
  const auto& zero = dynamic_cast<const ddp::ZeroRedundancyOptimizer&>(*ranks[0]->optimizer);
  fmt::print("\n{}", ddp::zero_block(zero.params(), zero.partition(), state));
}

// What --report repeats of the printed text: the cmp tables and the comm hook's table.
struct Printed {
  std::string tables, hooks;
};

// The synchronised iteration from which DDP uses its rebuilt buckets: 1, or 2 under static_graph (torch rebuilds one
// iteration later there).
int64_t rebuilt_from(const ddp::Config& cfg) { return cfg.static_graph ? 2 : 1; }

// Why the run shows no rebuilt layout ("" : it does): torch 1.13 never rebuilds with find_unused_parameters=True
// (without static_graph); a run that raised, or that ends before the rebuilt layout's first iteration, never
// uses one.
std::string no_rebuilt_layout(const ddp::Config& cfg, const ddp::TrainLog& res) {
  if (cfg.find_unused_parameters && !cfg.static_graph)
    return "buckets never rebuilt: torch 1.13 keeps iteration 0's with find_unused_parameters=True";
  if (res.error) return "buckets not rebuilt: the run raised before DDP rebuilt them (below)";
  if (res.buckets_rebuilt.empty() || res.optimizer_steps <= rebuilt_from(cfg))
    return fmt::format("buckets not rebuilt within the run: DDP uses its rebuilt layout from iteration {}, and the run "
                       "took {} synchronised step{}",
                       rebuilt_from(cfg), res.optimizer_steps, res.optimizer_steps == 1 ? "" : "s");
  return "";
}

// The nn.Sequential models' output: DistributedSampler's epochs, the buckets, the cmp tables.
Printed print_sequential(const ddp::Config& cfg, const ddp::SimResult& res, const Flags& flags,
                             const std::string& explanation, const std::vector<float>& hand_grad) {
  const bool hand = cfg.hand_sync != ddp::HandSync::none;
  if (hand) {
    fmt::print("{}\n", describe_hand_sync(cfg, res));
  } else {
    fmt::print("buckets at iteration 0: {}\n", res.buckets_first);
  }
  if (const std::string j = ddp::join_summary(cfg); !j.empty()) fmt::print("{}\n", j);
  const bool quiet = flags.get_bool("quiet", false);
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
  if (hand) {
  } else if (const std::string why = no_rebuilt_layout(cfg, res); !why.empty()) {
    fmt::print("{}\n", why);
  } else {
    fmt::print("buckets from iteration {} (rebuilt in gradient-ready order, first bucket 1 MiB, cap {} MiB): {}\n",
               rebuilt_from(cfg), cfg.bucket_cap_mb, res.buckets_rebuilt);
  }
  for (const std::string& n : res.notes) fmt::print("{}\n", n);
  print_zero(cfg, res.replicas);
  if (!explanation.empty()) fmt::print("\n{}", explanation);
  Printed out;
  if (!res.hook_reports.empty()) out.hooks = ddp::format_hook_reports(cfg.comm_hook.name, res.hook_reports);
  if (!out.hooks.empty()) fmt::print("\n{}", out.hooks);
  out.tables = report_tables(cfg, res);
  if (hand) {
    std::vector<float> ddp_grad;
    const ddp::SimResult twin = ddp::simulate(ddp_twin(cfg), false, keep_first_average(&ddp_grad));
    out.tables += "\n" + hand_vs_ddp(cfg, res, twin, hand_grad, ddp_grad);
  }
  fmt::print("\n{}", out.tables);
  return out;
}

// The tiny GPT's output: each rank's losses, evaluations and clip norms, and every rank against rank 0.
void print_gpt(const ddp::Config& cfg, const gpt::GptSimResult& res, const std::vector<report::RankRecord>& ranks,
               const Flags& flags) {
  fmt::print("buckets at iteration 0 (model order): {}\n", report::short_names(res.buckets_first));
  if (const std::string why = no_rebuilt_layout(cfg, res); !why.empty()) {
    fmt::print("{}\n", why);
  } else {
    fmt::print("buckets from iteration {} (rebuilt in gradient-ready order; the tied wte is ready last): {}\n",
               rebuilt_from(cfg), report::short_names(res.buckets_rebuilt));
  }
  if (const std::string j = ddp::join_summary(cfg); !j.empty()) fmt::print("{}\n", j);
  if (!flags.get_bool("quiet", false)) {  // as ddp_verify --model gpt: no per-step lines nor cmp tables
    fmt::print("{}", report::gpt_summary(cfg, ranks));
    for (const std::string& n : res.notes) fmt::print("{}\n", n);
  }
  print_zero(cfg, res.ranks);
  if (!res.hook_reports.empty()) fmt::print("\n{}", ddp::format_hook_reports(cfg.comm_hook.name, res.hook_reports));
}

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
  const bool gpt = cfg.is_gpt();
  if (gpt) {
    for (const char* f : {"compare-single-device", "report"}) {
      if (flags.has(f)) throw UsageError(fmt::format("--{} does not apply to --model gpt (the sequential models' output)", f));
    }
  }
  const bool single = flags.get_bool("compare-single-device", false);
  const bool explain = flags.get_bool("explain", false);
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
  std::optional<TextData> text;  // --model gpt: its data set the vocabulary before the run is described
  if (gpt) {
    text.emplace(TextData::load(cfg.data));
    text->check_batch_shape(cfg.batch_size, cfg.gpt.block_size);
    cfg.gpt.vocab_size = text->vocab_size();
  }
  fmt::print("ddp_sim: {}\n{}", ddp::describe(cfg), ddp::describe_notes(cfg));
  if (gpt) {
    fmt::print("data: {} (vocabulary of {} bytes; train {} tokens, val {})\n", cfg.data, text->vocab_size(),
               text->tokens(Split::kTrain).size(), text->tokens(Split::kVal).size());
  }
  std::string explanation;
  report::ReportData page;
  ddp::SimHooks hooks;
  if (!gpt && (explain || !report_path.empty())) {  // the GPT's --explain compares its hook per bucket instead
    hooks.before_allreduce = [&](int64_t sync, size_t bucket, const std::vector<float*>& bufs, size_t n) {
      if (sync != 0 || bucket != 0) return;
      if (explain) explanation = explain_first_bucket(cfg, bufs, n);
      // The report draws the ring as a table of ranks: from 2 to 8 of them.
      if (!report_path.empty() && bufs.size() >= 2 && bufs.size() <= 8) page.ring = report::explain_data(cfg, bufs, n);
    };
  }
  // One simulation per run: the sequential models' replicas, or the GPT's ranks; the same loop under both.
  std::optional<ddp::SimResult> seq;
  std::optional<gpt::GptSimResult> tiny;
  std::vector<report::RankRecord> records;  // the GPT's ranks as its summary and dump read them
  Printed printed;                          // the sequential models' tables, for --report
  if (gpt) {
    tiny.emplace(gpt::simulate(cfg, *text, hooks));
    for (const auto& r : tiny->ranks) records.push_back(report::record_of(*r));
    print_gpt(cfg, *tiny, records, flags);
  } else {
    std::vector<float> hand_grad;  // --hand-sync: its step-0 average, against DDP's
    if (cfg.hand_sync != ddp::HandSync::none) hooks.after_allreduce = keep_first_average(&hand_grad).after_allreduce;
    seq.emplace(ddp::simulate(cfg, single, hooks));
    printed = print_sequential(cfg, *seq, flags, explanation, hand_grad);
  }
  const ddp::TrainLog& trained = gpt ? static_cast<const ddp::TrainLog&>(*tiny) : *seq;
  const std::string error = trained.error ? ddp::unfinished_reduction_message(*trained.error) : "";

  if (!trace.empty()) {
    if (std::string why = write_trace(trace, cfg, cost); !why.empty()) {
      std::fprintf(stderr, "ddp_sim: --trace: %s\n", why.c_str());
      return 1;
    }
  }
  if (!dump.empty()) {
    const std::string json = gpt ? report::gpt_dump_json(cfg, records, "", error) : dump_json(cfg, *seq);
    if (std::string why = write_file_atomic(dump, json); !why.empty()) {
      std::fprintf(stderr, "ddp_sim: --dump-params: %s\n", why.c_str());
      return 1;
    }
  }
  if (!report_path.empty()) {  // the sequential models only (refused above for the GPT)
    page.program = "ddp_sim";
    page.title = fmt::format("{} simulated replicas of torch DistributedDataParallel in one process", cfg.world_size);
    page.argv.assign(argv, argv + argc);
    page.config = ddp::describe(cfg);
    report::add_simulation(page, cfg, *seq);
    page.notes.push_back(printed.tables);
    if (!printed.hooks.empty()) page.notes.push_back(printed.hooks);
    page.timing = report::timing_of(build_timeline(cfg, cost), cfg.world_size);
    if (std::string why = write_file_atomic(report_path, report::render_html(page)); !why.empty()) {
      std::fprintf(stderr, "ddp_sim: --report: %s\n", why.c_str());
      return 1;
    }
  }
  if (trained.error) {  // torch raised here: what was printed above is the state it stopped in
    std::fprintf(stderr, "ddp_sim: RuntimeError at %s\n", error.c_str());
    return 1;
  }
  if (const auto& nf = trained.nonfinite) {
    std::fprintf(stderr, "ddp_sim: the run's numbers became NaN or inf at step %lld on rank %lld (%s first): %s\n",
                 static_cast<long long>(nf->step), static_cast<long long>(nf->rank), nf->what.c_str(),
                 cfg.inject_nan_rank >= 0 ? "--inject-nan put it there" : "it diverged");
    return 4;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("ddp_sim", argc, argv, run); }
