// bazel run //notebooks_ported/008_ddp_check -- [--mistake no-sampler|no-set-epoch|all]
// Lab 008 (no seed notebook): check a real PyTorch DDP run. train.py beside this file is a learner's DDP loop
// (an MLP, 2 Gloo ranks, torch 1.13) with the three lines of ddplab_trace added. The lab runs it with a
// classic mistake, shows what ddp_check finds in the run's own data, then runs the fix and shows the
// finding gone, with DDP's gradients and steps predicted bit for bit throughout.
#include <cstdio>

#include <fmt/format.h>

#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/traced_run.h"
#include "src/base/flags.h"

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: 008_ddp_check [--mistake no-sampler|no-set-epoch|all]
Runs notebooks_ported/008_ddp_check/train.py (PyTorch DDP, 2 Gloo ranks, traced) with a classic mistake and
with its fix, and prints what ddp_check finds in each run. [--mistake all]
)";

struct Mistake {
  const char* name;
  const char* what;  // the mistake, as the script has it
  const char* fix;   // the lines that fix it
};

constexpr Mistake kMistakes[] = {
    {"no-sampler", "loader = DataLoader(dataset, batch_size=8)            # no DistributedSampler",
     "sampler = DistributedSampler(dataset)\n    loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n"
     "    ... and sampler.set_epoch(epoch) at the top of each epoch"},
    {"no-set-epoch", "for epoch in range(2): for x, y in loader: ...       # sampler.set_epoch(epoch) never called",
     "for epoch in range(2):\n        sampler.set_epoch(epoch)\n        for x, y in loader: ..."},
};

// The run's verdict in a few lines: the summary, the findings, the verdict.
std::string checked(const std::string& mistake) {
  lab::TracedRun run;
  std::string why;
  lab::run_traced("/usr/bin/python3", "notebooks_ported/008_ddp_check/train.py", {"--mistake", mistake}, &run, &why);
  if (!why.empty()) return "  (not run: " + why + ")\n";
  if (run.status != 0) return fmt::format("  (train.py failed with exit status {}: run it by hand to see why)\n", run.status);
  const std::string text = check::format_text(lab::check_traced(run));
  std::string out;
  for (size_t at = text.find("\nsummary:") + 1, end; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    out += "  " + text.substr(at, end - at) + "\n";
  }
  return out;
}

int run(int argc, char** argv) {
  const Flags flags(argc, argv, {"mistake"});
  if (flags.help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  const std::string which = flags.get_choice("mistake", "all", {"no-sampler", "no-set-epoch", "all"});
  lab::print_line("# Lab 008: a real DDP run (train.py, 2 Gloo ranks, torch 1.13) checked by ddp_check");
  for (const Mistake& m : kMistakes) {
    if (which != "all" && which != m.name) continue;
    lab::print_line(fmt::format("\n## mistake: {}\n    {}\nddp_check on the run:\n{}", m.name, m.what, checked(m.name)));
    lab::print_line(fmt::format("## the fix:\n    {}\nddp_check on the fixed run:\n{}", m.fix, checked("none")));
  }
  lab::print_line(
      "Both mistakes leave DDP itself correct: every rank's gradient is DDP's average bit for bit, and the\n"
      "replicas stay equal. What goes wrong is the data, and only the run's inputs show it: without a\n"
      "DistributedSampler each rank computes the same gradient (world_size times the work for one rank's\n"
      "progress); without set_epoch each epoch repeats the first one's order.");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("008_ddp_check", argc, argv, run); }
