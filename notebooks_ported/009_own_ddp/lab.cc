// bazel run //notebooks_ported/009_own_ddp -- [--version tutorial|flat|hooks|buckets|all] [--world-size N]
// Lab 009: notebook 000 averages two replicas' gradients by hand; here the same averaging runs on real ranks
// (train.py beside this file: notebook 000's MLP and data, 3 Gloo ranks, torch 1.13), written by hand in four
// versions as courses teach it. Each version runs with its classic mistake, traced, and ddp_check says what it
// finds; then the fix, checked again: every collective replayed, every gradient explained, and how many of the
// values stepped with are the bits torch's DistributedDataParallel computes from the same local gradients.
#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/traced_run.h"
#include "src/base/flags.h"

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: 009_own_ddp [--version tutorial|flat|hooks|buckets|all] [--world-size N]
Runs notebooks_ported/009_own_ddp/train.py (data parallelism written by hand, N Gloo ranks, traced; N = 3 unless
given, 2 to 8) in each version with its classic mistake and with its fix, and prints what ddp_check finds in each
run. [--version all]
)";

struct Version {
  const char* name;
  const char* sync;     // the averaging, as train.py writes it
  const char* mistake;  // the mistake, as the script has it
  const char* fix;
};

constexpr Version kVersions[] = {
    {"tutorial", "for p in model.parameters(): dist.all_reduce(p.grad, op=SUM); p.grad /= world_size",
     "dist.all_reduce(p.grad, op=SUM)                      # and never divided", "p.grad /= world_size"},
    {"flat", "flat = torch.cat([p.grad.reshape(-1) ...]); dist.all_reduce(flat); flat /= world_size; copy back",
     "flat /= 2                                             # notebook 000's two replicas, written in",
     "flat /= dist.get_world_size()"},
    {"hooks",
     "a hook on each gradient accumulator: handles.append(dist.all_reduce(p.grad, async_op=True));\n"
     "    finish(): work.wait(); p.grad /= world_size",
     "finish(): p.grad /= world_size                        # the handles never waited",
     "for work in handles: work.wait()   # before dividing, before optimizer.step()"},
    {"buckets",
     "each hook counts its bucket's ready gradients; at the last: flatten, dist.all_reduce(flat, async_op=True);\n"
     "    finish(): wait, / world_size, copy back",
     "finish(): ... (the ready counts kept from step to step)  # never reset",
     "self.ready = [0] * len(self.buckets)   # at the end of finish()"},
};

struct Checked {
  std::string text;          // the lines a learner reads
  bool ran = false;
  int64_t values = 0, exact = 0;  // vs DDP
};

// One run of train.py, checked: the summary, how the script averages, against DDP, the hand-written sync's own
// findings (the rest counted: they follow from it), the verdict.
Checked checked(const std::string& version, bool mistake, int world_size) {
  Checked out;
  lab::TracedRun run;
  std::string why;
  std::vector<std::string> args = {"--version", version, "--world-size", std::to_string(world_size)};
  if (mistake) args.push_back("--mistake");
  lab::run_traced("/usr/bin/python3", "notebooks_ported/009_own_ddp/train.py", args, &run, &why);
  if (!why.empty()) return {"  (not run: " + why + ")\n"};
  if (run.status != 0) return {fmt::format("  (train.py failed with exit status {}: run it by hand to see why)\n", run.status)};
  const check::CheckResult r = lab::check_traced(run);
  const std::string text = check::format_text(r);
  std::map<std::string, int> others;
  bool table = false;  // the cmp table at the first divergence (ddp_check prints it; the lab leaves it out)
  for (size_t at = text.find("\nsummary:") + 1, end; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    table = table || line.empty() || line[0] == '#';
    if (table && line.rfind("verdict:", 0) != 0) continue;
    const bool finding = line.rfind("PROBLEM ", 0) == 0 || line.rfind("note ", 0) == 0;
    if (finding && line.find("hand-sync/") == std::string::npos) {
      ++others[line.substr(line.find(' ') + 1, line.find(' ', line.find(' ') + 1) - line.find(' ') - 1)];
      continue;
    }
    if (line.rfind("verdict:", 0) == 0 && !others.empty()) {
      std::string names;
      for (const auto& [kind, n] : others) names += fmt::format("{}{} x{}", names.empty() ? "" : ", ", kind, n);
      out.text += "  (and what follows from it: " + names + ")\n";
    }
    out.text += "  " + line + "\n";
  }
  out.ran = true;
  out.values = r.hand.values;
  out.exact = r.hand.values_exact;
  return out;
}

int run(int argc, char** argv) {
  const Flags flags(argc, argv, {"version", "world-size"});
  if (flags.help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  const std::string which = flags.get_choice("version", "all", {"tutorial", "flat", "hooks", "buckets", "all"});
  const int world_size = static_cast<int>(flags.get_int("world-size", 3, 2, 8));
  lab::print_line(fmt::format("# Lab 009: notebook 000's averaging by hand on {} real ranks (train.py, Gloo, torch "
                              "1.13), checked by ddp_check",
                              world_size));
  for (const Version& v : kVersions) {
    if (which != "all" && which != v.name) continue;
    const Checked bad = checked(v.name, true, world_size), good = checked(v.name, false, world_size);
    lab::print_line(fmt::format("\n## version: {}\n    {}\nmistake:\n    {}\nddp_check on the run:\n{}", v.name, v.sync,
                                v.mistake, bad.text));
    lab::print_line(fmt::format("the fix:\n    {}\nddp_check on the fixed run:\n{}", v.fix, good.text));
    if (good.ran)
      lab::print_line(fmt::format("check: {} at world size {}: {} of {} gradient values stepped with are torch DDP's bits",
                                  v.name, world_size, good.exact, good.values));
  }
  lab::print_line(
      "\nEvery fixed version averages exactly what it means to: its all-reduces are Gloo's, its division is\n"
      "replayed bit for bit. Against torch's DDP only part of the values are the same bits at 3 ranks or more\n"
      "(3 and 4 tested): DDP multiplies each gradient by float(1/world_size) before the sum (not exact at 3),\n"
      "in its own buckets, and three or more additions round by their order; at 2 ranks (notebook 000's) all are. Two of the mistakes keep the\n"
      "replicas equal (never divided, a hard-coded 2): a test that only compares the ranks passes them.");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("009_own_ddp", argc, argv, run); }
