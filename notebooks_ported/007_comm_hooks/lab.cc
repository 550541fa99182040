// bazel run //notebooks_ported/007_comm_hooks -- what DDP's communication hooks do to the bits and to the loss,
// what ZeroRedundancyOptimizer saves per rank. One small MLP on the simulator (src/ddp/comm_hook.h,
// src/ddp/zero.h); the lines starting "check:" are claims that reference.py beside this file prints from real
// torch 1.13 (its hooks and ZeroRedundancyOptimizer on Gloo), and tests/notebooks_test finds them here.
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/lab_report.h"
#include "src/compare.h"
#include "src/ddp/trainer.h"
#include "src/ddp/zero.h"
#include "src/flags.h"
#include "src/launch/run_flags.h"
#include "src/report/report.h"

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: 007_comm_hooks [flags]
An MLP 32-64-64-10 (ReLU, MSE, 96 random samples, batch 8 per rank, SGD lr 0.05 momentum 0.9) under DDP on
the simulator, once per communication hook (none, allreduce, fp16-compress, powersgd rank 1, noop), then with
ZeroRedundancyOptimizer (SGD momentum and Adam) at world size 3. Defaults in brackets.
  --world-size N   ranks of the hook runs, 2..8 [2]     --epochs E   [2]
  --report FILE.html   the transcript, the loss per hook, the compression error per bucket, state per rank
)";

const std::vector<std::string> kHooks = {"none", "allreduce", "fp16-compress", "powersgd", "noop"};

ddp::Config base_config(const Flags& flags) {
  ddp::Config c;
  c.layers = {32, 64, 64, 10};
  c.relu = true;
  c.samples = 96;
  c.batch_size = 8;
  c.lr = 0.05;
  c.momentum = 0.9;
  c.world_size = flags.get_int("world-size", 2, 2, 8);
  c.epochs = flags.get_int("epochs", 2, 1, 20);
  c.threads = 1;
  ddp::validate(c);
  return c;
}

// A run keeps its config: the replicas point into it.
struct Run {
  ddp::Config cfg;
  ddp::SimResult res;
};
std::unique_ptr<Run> simulate(const ddp::Config& cfg) {
  auto r = std::make_unique<Run>();
  r->cfg = cfg;
  r->res = ddp::simulate(r->cfg, false);
  return r;
}
std::unique_ptr<Run> with_hook(ddp::Config cfg, const std::string& hook) {
  cfg.comm_hook.name = hook;
  cfg.compare_hook = hook != "none";  // the built-in average of the same gradients, beside the hook's
  return simulate(cfg);
}

void say(const std::string& text) {
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lab::print_line(text.substr(start, nl - start));
  }
  if (start < text.size()) lab::print_line(text.substr(start));
}

// Losses as reference.py prints torch's: float32 values with 9 significant digits.
std::string g9(float v) { return fmt::format("{:.9g}", static_cast<double>(v)); }

std::vector<float> losses_of(const Run& run, int64_t rank) {
  std::vector<float> l;
  for (const ddp::BatchLog& b : run.res.log) {
    if (b.rank == rank) l.push_back(b.loss);
  }
  return l;
}

// How many parameter values of model `a` differ (bits) from model `b`'s, of how many, and the largest |diff|.
CmpResult differ(const Module& a, const Module& b) {
  CmpResult all;
  all.exact = true;
  for (const CmpResult& r : cmp_models(a, b)) {
    all.numel += r.numel;
    all.num_different += r.num_different;
    all.exact = all.exact && r.exact;
    all.maxdiff = std::max(all.maxdiff, r.maxdiff);
  }
  return all;
}

// The synchronised step whose buckets the table shows: the first one the hook compresses (PowerSGD is
// allreduce_hook before start_powerSGD_iter).
size_t shown_step(const Run& run) {
  return run.cfg.comm_hook.name == "powersgd" ? static_cast<size_t>(run.cfg.comm_hook.powersgd_start_iter) : 0;
}

const char* py(bool v) { return v ? "True" : "False"; }

void hooks_section(const std::vector<std::unique_ptr<Run>>& runs, lab::LabReport& page) {
  const int64_t ws = runs[0]->cfg.world_size;
  say(fmt::format(
      "\n# 1. What each hook sends, and how far its average is from the built-in one (rank 0, world size {})\n"
      "{:<14} {:>4} {:>6} {:>9} {:>15} {:>13} {:>9}  sent\n",
      ws, "hook", "step", "bucket", "bytes", "values differ", "max |diff|", "max ulps"));
  std::vector<svg::BarItem> counts, diffs;
  for (const auto& run : runs) {
    const std::string& hook = run->cfg.comm_hook.name;
    if (hook == "none") {
      const int64_t n = differ(run->res.replicas[0]->model, run->res.replicas[0]->model).numel;
      say(fmt::format("{:<14} {:>4} {:>6} {:>9} {:>15} {:>13} {:>9}  float32 x {} (grad * 1/{}, then SUM)\n", hook,
                      "all", "all", 4 * n, "-", "-", "-", n, ws));
      continue;
    }
    const size_t step = shown_step(*run);
    const auto& reports = run->res.hook_reports.at(step);
    for (size_t b = 0; b < reports.size(); ++b) {
      const ddp::HookReport& h = reports[b];
      say(fmt::format("{:<14} {:>4} {:>6} {:>9} {:>15} {:>13} {:>9}  {}\n", hook, step, b, h.bytes,
                      fmt::format("{} of {}", h.differ, h.numel), fmt::format("{:.3g}", h.max_abs_diff), h.max_ulps,
                      h.sent));
      const std::string label = fmt::format("{} bucket {}", hook, b);
      const size_t colour = static_cast<size_t>(&run - &runs[0]);
      counts.push_back({label, static_cast<double>(h.differ), fmt::format("{} of {}", h.differ, h.numel),
                        svg::series_colour(colour)});
      diffs.push_back({label, h.max_abs_diff, fmt::format("{:.3g}", h.max_abs_diff), svg::series_colour(colour)});
    }
  }
  say("  max ulps counts float32 steps: huge where a value is near zero (its neighbours are tiny), so read\n"
      "  it beside max |diff|.\n");
  say("  allreduce_hook divides each bucket by the world size (div_), the built-in multiplies by 1/world_size:\n"
      "  the same at 2 (a power of two), not always at 3. fp16-compress rounds to float16 at the cast, the\n"
      "  division and every addition of the ring. powersgd sends P and Q (rank 1) for each weight and the\n"
      "  biases as they are. noop sends nothing: its 'average' is each rank's own gradient.\n");
  if (page.active()) {
    page.data()->figures.push_back(
        {fmt::format("Compression error per bucket: values that differ from the built-in average (world size {})", ws),
         "Rank 0's bucket(s) in the first step each hook compresses (PowerSGD's first after start_powerSGD_iter), "
         "against DDP's built-in average of the same raw gradients.",
         svg::bar_chart(counts, "values whose bits differ")});
    page.data()->figures.push_back({"Compression error per bucket: the largest |hook - built-in| (log scale)",
                                    "The same buckets: how far the worst value moved. No bar: every value equal.",
                                    svg::bar_chart(diffs, "max |diff|", true)});
  }
}

void losses_section(const std::vector<std::unique_ptr<Run>>& runs, lab::LabReport& page) {
  say("\n# 2. The loss, rank 0, step by step, per hook\n");
  std::string head = fmt::format("{:>4}", "step");
  for (const auto& run : runs) head += fmt::format(" {:>14}", run->cfg.comm_hook.name);
  say(head + "\n");
  const size_t steps = losses_of(*runs[0], 0).size();
  for (size_t s = 0; s < steps; ++s) {
    std::string line = fmt::format("{:>4}", s);
    for (const auto& run : runs) line += fmt::format(" {:>14}", g9(losses_of(*run, 0)[s]));
    say(line + "\n");
  }
  for (const auto& run : runs) {
    std::string line =
        fmt::format("check: ws {} hook {} final loss per rank:", run->cfg.world_size, run->cfg.comm_hook.name);
    for (int64_t r = 0; r < run->cfg.world_size; ++r) line += " " + g9(losses_of(*run, r).back());
    say(line + "\n");
    if (page.active()) page.data()->losses.push_back(report::loss_series(run->cfg.comm_hook.name, losses_of(*run, 0)));
  }
  if (page.active()) {
    page.add_simulation(runs[0]->cfg, runs[0]->res);
    page.data()->losses.erase(page.data()->losses.begin() + static_cast<std::ptrdiff_t>(runs.size()),
                              page.data()->losses.end());  // the hooks' rank-0 curves only
    page.data()->loss_x_label = "step (rank 0's loss, one line per hook)";
    page.data()->loss_hint =
        "Rank 0's loss, one line per communication hook, the same model, data and seed: the lines part where a "
        "hook's average first changes the weights (fp16 and powersgd slightly, noop most).";
  }
}

void ranks_section(const std::vector<std::unique_ptr<Run>>& runs) {
  say("\n# 3. Do the ranks still agree? Parameters after training, every rank against rank 0\n");
  for (const auto& run : runs) {
    for (int64_t r = 1; r < run->cfg.world_size; ++r) {
      const CmpResult d = differ(run->res.replicas[static_cast<size_t>(r)]->model, run->res.replicas[0]->model);
      say(fmt::format("check: ws {} hook {} rank {} vs rank 0: {} of {} parameter values differ\n", run->cfg.world_size,
                      run->cfg.comm_hook.name, r, d.num_different, d.numel));
    }
  }
  say("  Every hook that averages leaves every rank with the same bits. noop_hook leaves each rank its own\n"
      "  gradient: each rank steps its own way and the replicas drift apart (their losses above, too).\n"
      "  That is what DDP's all-reduce is for.\n");
}

void allreduce_section(const ddp::Config& base) {
  say("\n# 4. allreduce_hook against no hook: div_(world_size) is not the built-in's multiply by 1/world_size\n");
  for (const int64_t ws : {2, 3}) {
    ddp::Config c = base;
    c.world_size = ws;
    const auto none = with_hook(c, "none"), all = with_hook(c, "allreduce");
    const CmpResult d = differ(all->res.replicas[0]->model, none->res.replicas[0]->model);
    const ddp::HookReport& first = all->res.hook_reports.at(0).at(0);
    say(fmt::format("check: ws {} allreduce_hook vs no hook after training: {} of {} parameter values differ\n", ws,
                    d.num_different, d.numel));
    say(
        fmt::format("  bitwise equal: {} | max |diff| {} | the first step's bucket: {} of {} averaged gradients\n"
                    "  differ from the built-in's (max {} ulps)\n",
                    py(d.exact), python_float_repr(d.maxdiff), first.differ, first.numel, first.max_ulps));
  }
  say("  g / 2 and g * 0.5 are the same float; g / 3 and g * float(1/3) differ in the last bit for many g.\n"
      "  Summed over the ranks, a last-bit difference is many ulps of a sum that cancels to near zero. The\n"
      "  weights then differ from the first step on, a little (the max |diff| above).\n");
}

void zero_section(const ddp::Config& base, lab::LabReport& page) {
  say("\n# 5. ZeroRedundancyOptimizer: optimizer state per rank, world size 3\n");
  std::vector<svg::BarItem> bars;
  for (const bool adam : {false, true}) {
    ddp::Config c = base;
    c.world_size = 3;
    c.optimizer = adam ? ddp::OptimizerKind::adam : ddp::OptimizerKind::sgd;
    c.lr = adam ? 0.01 : 0.05;
    c.momentum = adam ? 0.0 : 0.9;
    const auto plain = simulate(c);
    c.zero = true;
    const auto zero = simulate(c);
    std::vector<int64_t> state;
    for (const auto& rep : zero->res.replicas) state.push_back(rep->optimizer->state_numel());
    const auto& z = dynamic_cast<const ddp::ZeroRedundancyOptimizer&>(*zero->res.replicas[0]->optimizer);
    const std::string what = adam ? "Adam lr 0.01" : "SGD lr 0.05 momentum 0.9";
    say(fmt::format("{}:\n{}", what, ddp::zero_block(z.params(), z.partition(), state)));
    const int64_t full = plain->res.replicas[0]->optimizer->state_numel();
    std::string line = fmt::format("check: ZeroRedundancyOptimizer {} ws 3: state floats per rank", what);
    for (const int64_t s : state) line += fmt::format(" {}", s);
    const CmpResult d = differ(zero->res.replicas[0]->model, plain->res.replicas[0]->model);
    say(line + fmt::format(" | plain DDP {} on every rank | parameters bitwise plain DDP's: {}\n", full, py(d.exact)));
    for (size_t r = 0; r < state.size(); ++r) {
      bars.push_back({fmt::format("{}: plain DDP, rank {}", adam ? "Adam" : "SGD", r), static_cast<double>(full),
                      fmt::format("{} floats ({} B)", full, 4 * full), "#8c8c8c"});
      bars.push_back({fmt::format("{}: ZeRO, rank {}", adam ? "Adam" : "SGD", r), static_cast<double>(state[r]),
                      fmt::format("{} floats ({} B)", state[r], 4 * state[r]), svg::series_colour(adam ? 1 : 0)});
    }
  }
  say("  Each parameter is stepped by one rank with the plain optimizer's arithmetic, then broadcast from it:\n"
      "  the same bits as plain DDP, with each rank holding only its shard's momentum (or Adam's two moments).\n"
      "  The partition is greedy by whole tensors, largest first: lumpy when one tensor dominates.\n");
  if (page.active()) {
    page.data()->figures.push_back(
        {"Optimizer state per rank: plain DDP against ZeroRedundancyOptimizer (world size 3)",
         "Floats of optimizer state each rank holds after training (momentum buffers, "
         "Adam's exp_avg and exp_avg_sq; not Adam's 0-dim step).",
         svg::bar_chart(bars, "optimizer-state floats")});
  }
}

int run(int argc, char** argv) {
  const Flags flags(argc, argv, {"world-size", "epochs", "report"});
  if (flags.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  const ddp::Config cfg = base_config(flags);
  dist::RunFlags sim;  // the simulator only: the lab compares every rank's state in one process
  sim.backend = dist::Backend::sim;
  sim.world_size = static_cast<int>(cfg.world_size);
  lab::LabReport page(flags, sim, argc, argv);
  say(fmt::format("Lab 007: communication hooks and ZeroRedundancyOptimizer, {} simulated ranks\n{}\n", cfg.world_size,
                  ddp::describe(cfg)));
  std::vector<std::unique_ptr<Run>> runs;
  for (const std::string& hook : kHooks) runs.push_back(with_hook(cfg, hook));
  hooks_section(runs, page);
  losses_section(runs, page);
  ranks_section(runs);
  allreduce_section(cfg);
  zero_section(cfg, page);
  return page.write();
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("007_comm_hooks", argc, argv, run); }
