// bazel run //notebooks_ported/007_comm_hooks -- what DDP's communication hooks do to the bits and to the loss,
// what ZeroRedundancyOptimizer saves per rank. One small MLP on simulated or real ranks (lab::Group;
// src/ddp/comm_hook.h, src/ddp/zero.h); the lines starting "check:" are claims that reference.py beside this file prints from real
// torch 1.13 (its hooks and ZeroRedundancyOptimizer on Gloo), and tests/notebooks_test finds them here.
#include <algorithm>
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "notebooks_ported/lab/group.h"
#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/lab_report.h"
#include "src/base/compare.h"
#include "src/ddp/trainer.h"
#include "src/ddp/zero.h"
#include "src/base/flags.h"
#include "src/launch/run_flags.h"
#include "src/launch/runner.h"
#include "src/report/report.h"

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: 007_comm_hooks [flags]
An MLP 32-64-64-10 (ReLU, MSE, 96 random samples, batch 8 per rank, SGD lr 0.05 momentum 0.9) under DDP,
once per communication hook (none, allreduce, fp16-compress, powersgd rank 1, noop), then with
ZeroRedundancyOptimizer (SGD momentum and Adam) at world size 3: on simulated ranks, or real ones (--backend
gloo|nccl --nproc N; a part at another world size than N is simulated, and says so). Defaults in brackets.
  ranks: --world-size N (sim) or --nproc N, 2..8 [2]
  --epochs E   [2]
  --report FILE.html   (sim) the transcript, the loss per hook, the compression error per bucket, state per rank
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
  c.world_size = 2;
  c.epochs = flags.get_int("epochs", 2, 1, 20);
  c.threads = 1;
  return c;
}

using Run = lab::Trained;
std::unique_ptr<Run> with_hook(const lab::Group& g, ddp::Config cfg, const std::string& hook) {
  cfg.comm_hook.name = hook;
  cfg.compare_hook = hook != "none";  // the built-in average of the same gradients, beside the hook's
  return lab::train(g, cfg);
}

// Losses as reference.py prints torch's: float32 values with 9 significant digits.
std::string g9(float v) { return fmt::format("{:.9g}", static_cast<double>(v)); }

const std::vector<float>& losses_of(const Run& run, int64_t rank) { return run.ranks[static_cast<size_t>(rank)].losses; }

// How many parameter values of rank state `a` differ (bits) from `b`'s, of how many, and the largest |diff|.
CmpResult differ(const lab::RankState& a, const lab::RankState& b) {
  CmpResult all;
  all.exact = true;
  const auto rows = lab::cmp_states(a, b);
  for (size_t i = 0; i < a.num_params; ++i) {
    const CmpResult& r = rows[i];
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

void hooks_section(const lab::Group& g, const std::vector<std::unique_ptr<Run>>& runs, lab::LabReport& page) {
  const int64_t ws = runs[0]->cfg.world_size;
  g.say(fmt::format(
      "\n# 1. What each hook sends, and how far its average is from the built-in one (rank 0, world size {})\n"
      "{:<14} {:>4} {:>6} {:>9} {:>15} {:>13} {:>9}  sent\n",
      ws, "hook", "step", "bucket", "bytes", "values differ", "max |diff|", "max ulps"));
  std::vector<svg::BarItem> counts, diffs;
  for (const auto& run : runs) {
    const std::string& hook = run->cfg.comm_hook.name;
    if (hook == "none") {
      const int64_t n = differ(run->ranks[0], run->ranks[0]).numel;
      g.say(fmt::format("{:<14} {:>4} {:>6} {:>9} {:>15} {:>13} {:>9}  float32 x {} (grad * 1/{}, then SUM)\n", hook,
                      "all", "all", 4 * n, "-", "-", "-", n, ws));
      continue;
    }
    const size_t step = shown_step(*run);
    const auto& reports = run->hook_reports().at(step);
    for (size_t b = 0; b < reports.size(); ++b) {
      const ddp::HookReport& h = reports[b];
      g.say(fmt::format("{:<14} {:>4} {:>6} {:>9} {:>15} {:>13} {:>9}  {}\n", hook, step, b, h.bytes,
                      fmt::format("{} of {}", h.differ, h.numel), fmt::format("{:.3g}", h.max_abs_diff), h.max_ulps,
                      h.sent));
      const std::string label = fmt::format("{} bucket {}", hook, b);
      const size_t colour = static_cast<size_t>(&run - &runs[0]);
      counts.push_back({label, static_cast<double>(h.differ), fmt::format("{} of {}", h.differ, h.numel),
                        svg::series_colour(colour)});
      diffs.push_back({label, h.max_abs_diff, fmt::format("{:.3g}", h.max_abs_diff), svg::series_colour(colour)});
    }
  }
  g.say("  max ulps counts float32 steps: huge where a value is near zero (its neighbours are tiny), so read\n"
      "  it beside max |diff|.\n");
  g.say("  allreduce_hook divides each bucket by the world size (div_), the built-in multiplies by 1/world_size:\n"
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

void losses_section(const lab::Group& g, const std::vector<std::unique_ptr<Run>>& runs, lab::LabReport& page) {
  g.say("\n# 2. The loss, rank 0, step by step, per hook\n");
  std::string head = fmt::format("{:>4}", "step");
  for (const auto& run : runs) head += fmt::format(" {:>14}", run->cfg.comm_hook.name);
  g.say(head + "\n");
  const size_t steps = losses_of(*runs[0], 0).size();
  for (size_t s = 0; s < steps; ++s) {
    std::string line = fmt::format("{:>4}", s);
    for (const auto& run : runs) line += fmt::format(" {:>14}", g9(losses_of(*run, 0)[s]));
    g.say(line + "\n");
  }
  for (const auto& run : runs) {
    std::string line =
        fmt::format("check: ws {} hook {} final loss per rank:", run->cfg.world_size, run->cfg.comm_hook.name);
    for (int64_t r = 0; r < run->cfg.world_size; ++r) line += " " + g9(losses_of(*run, r).back());
    g.say(line + "\n");
    if (page.active()) page.data()->losses.push_back(report::loss_series(run->cfg.comm_hook.name, losses_of(*run, 0)));
  }
  if (page.active()) {
    page.add_simulation(runs[0]->cfg, runs[0]->sim);
    page.data()->losses.erase(page.data()->losses.begin() + static_cast<std::ptrdiff_t>(runs.size()),
                              page.data()->losses.end());  // the hooks' rank-0 curves only
    page.data()->loss_x_label = "step (rank 0's loss, one line per hook)";
    page.data()->loss_hint =
        "Rank 0's loss, one line per communication hook, the same model, data and seed: the lines part where a "
        "hook's average first changes the weights (fp16 and powersgd slightly, noop most).";
  }
}

void ranks_section(const lab::Group& g, const std::vector<std::unique_ptr<Run>>& runs) {
  g.say("\n# 3. Do the ranks still agree? Parameters after training, every rank against rank 0\n");
  for (const auto& run : runs) {
    for (int64_t r = 1; r < run->cfg.world_size; ++r) {
      const CmpResult d = differ(run->ranks[static_cast<size_t>(r)], run->ranks[0]);
      g.say(fmt::format("check: ws {} hook {} rank {} vs rank 0: {} of {} parameter values differ\n", run->cfg.world_size,
                      run->cfg.comm_hook.name, r, d.num_different, d.numel));
    }
  }
  g.say("  Every hook that averages leaves every rank with the same bits. noop_hook leaves each rank its own\n"
      "  gradient: each rank steps its own way and the replicas drift apart (their losses above, too).\n"
      "  That is what DDP's all-reduce is for.\n");
}

void allreduce_section(const lab::Group& g, const ddp::Config& base) {
  g.say("\n# 4. allreduce_hook against no hook: div_(world_size) is not the built-in's multiply by 1/world_size\n");
  for (const int64_t ws : {2, 3}) {
    ddp::Config c = base;
    c.world_size = ws;
    if (const std::string note = g.simulated_note(ws); !note.empty()) g.say(note);
    const auto none = with_hook(g, c, "none"), all = with_hook(g, c, "allreduce");
    const CmpResult d = differ(all->ranks[0], none->ranks[0]);
    const ddp::HookReport& first = all->hook_reports().at(0).at(0);
    g.say(fmt::format("check: ws {} allreduce_hook vs no hook after training: {} of {} parameter values differ\n", ws,
                    d.num_different, d.numel));
    g.say(
        fmt::format("  bitwise equal: {} | max |diff| {} | the first step's bucket: {} of {} averaged gradients\n"
                    "  differ from the built-in's (max {} ulps)\n",
                    py(d.exact), python_float_repr(d.maxdiff), first.differ, first.numel, first.max_ulps));
  }
  g.say("  g / 2 and g * 0.5 are the same float; g / 3 and g * float(1/3) differ in the last bit for many g.\n"
      "  Summed over the ranks, a last-bit difference is many ulps of a sum that cancels to near zero. The\n"
      "  weights then differ from the first step on, a little (the max |diff| above).\n");
}

void zero_section(const lab::Group& g, const ddp::Config& base, lab::LabReport& page) {
  g.say("\n# 5. ZeroRedundancyOptimizer: optimizer state per rank, world size 3\n");
  if (const std::string note = g.simulated_note(3); !note.empty()) g.say(note);
  std::vector<svg::BarItem> bars;
  for (const bool adam : {false, true}) {
    ddp::Config c = base;
    c.world_size = 3;
    c.optimizer = adam ? ddp::OptimizerKind::adam : ddp::OptimizerKind::sgd;
    c.lr = adam ? 0.01 : 0.05;
    c.momentum = adam ? 0.0 : 0.9;
    const auto plain = lab::train(g, c);
    c.zero = true;
    const auto zero = lab::train(g, c);
    std::vector<int64_t> state;
    for (const lab::RankState& r : zero->ranks) state.push_back(r.optimizer_state_numel);
    // The partition is the same on every rank: this process's own optimizer has it.
    const auto& z = dynamic_cast<const ddp::ZeroRedundancyOptimizer&>(*zero->own().optimizer);
    const std::string what = adam ? "Adam lr 0.01" : "SGD lr 0.05 momentum 0.9";
    g.say(fmt::format("{}:\n{}", what, ddp::zero_block(z.params(), z.partition(), state)));
    const int64_t full = plain->ranks[0].optimizer_state_numel;
    std::string line = fmt::format("check: ZeroRedundancyOptimizer {} ws 3: state floats per rank", what);
    for (const int64_t s : state) line += fmt::format(" {}", s);
    const CmpResult d = differ(zero->ranks[0], plain->ranks[0]);
    g.say(line + fmt::format(" | plain DDP {} on every rank | parameters bitwise plain DDP's: {}\n", full, py(d.exact)));
    for (size_t r = 0; r < state.size(); ++r) {
      bars.push_back({fmt::format("{}: plain DDP, rank {}", adam ? "Adam" : "SGD", r), static_cast<double>(full),
                      fmt::format("{} floats ({} B)", full, 4 * full), "#8c8c8c"});
      bars.push_back({fmt::format("{}: ZeRO, rank {}", adam ? "Adam" : "SGD", r), static_cast<double>(state[r]),
                      fmt::format("{} floats ({} B)", state[r], 4 * state[r]), svg::series_colour(adam ? 1 : 0)});
    }
  }
  g.say("  Each parameter is stepped by one rank with the plain optimizer's arithmetic, then broadcast from it:\n"
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

int body(const lab::Group& g, const ddp::Config& cfg, lab::LabReport& page) {
  g.say(fmt::format("Lab 007: communication hooks and ZeroRedundancyOptimizer, {}\n{}\n",
                    g.describe(cfg.world_size), ddp::describe(cfg)));
  std::vector<std::unique_ptr<Run>> runs;
  for (const std::string& hook : kHooks) runs.push_back(with_hook(g, cfg, hook));
  hooks_section(g, runs, page);
  losses_section(g, runs, page);
  ranks_section(g, runs);
  allreduce_section(g, cfg);
  zero_section(g, cfg, page);
  return 0;
}

int run(int argc, char** argv) { return lab::run_group_lab(argc, argv, {"epochs"}, kUsage, base_config, body); }

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("007_comm_hooks", argc, argv, run); }
