// bazel run //bench:recorder_course -- [--steps 2000] [--world-size 3] [--runs 3] [--python /usr/bin/python3]
// The recorder's cost on a course-sized run (bench/course_run.py: an MLP of 22K parameters, 3 Gloo ranks, two
// micro-batches under no_sync, clip_grad_norm_, AdamW, a DistributedSampler): the same training untraced and
// traced with the three lines a learner adds, alternated --runs times, each timed over its training loop (the
// sum of the ranks' CPU seconds, and rank 0's wall seconds; process start, imports and init_process_group not
// counted). Prints the medians and their ratios, then ddp_check's verdict on the last traced run.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/proc.h"
#include "src/base/errors.h"
#include "src/base/flags.h"
#include "src/base/parallel.h"

namespace {

using namespace ddplab;
using bench::Proc, bench::median, bench::spawn;
namespace fs = std::filesystem;

struct Loop {
  double cpu_s = 0, wall_s = 0;
};

Loop loop_of(const Proc& p, const std::string& what) {
  const size_t cpu = p.out.find("cpu_s "), wall = p.out.find("wall_s ");
  if (p.status != 0 || cpu == std::string::npos || wall == std::string::npos)
    throw RunError(what + " failed (exit " + std::to_string(p.status) + ")");
  return {std::stod(p.out.substr(cpu + 6)), std::stod(p.out.substr(wall + 7))};
}

int run(int argc, char** argv) {
  Flags f(argc, argv, {"steps", "world-size", "runs", "python", "dir"});
  if (f.positional().size() != 2) throw UsageError("usage: recorder_course COURSE_SCRIPT DDP_CHECK [flags] (bazel run passes both)");
  const std::string script = f.positional()[0], checker = fs::absolute(f.positional()[1]).string();
  const int64_t steps = f.get_int("steps", 2000, 20, 1000000), ws = f.get_int("world-size", 3, 1, 16);
  const int64_t runs = f.get_int("runs", 3, 1, 100);
  const std::string python = f.get_string("python", "/usr/bin/python3");
  const std::string dir = f.get_string("dir", "/tmp/ddplab_recorder_course_bench");
  const std::vector<std::string> common = {python, script, "--steps", std::to_string(steps), "--world-size", std::to_string(ws)};
  std::vector<double> cpu_u, cpu_t, wall_u, wall_t, cpu_ratio, wall_ratio, proc_ratio;
  for (int64_t r = 0; r < runs; ++r) {
    fs::remove_all(dir);
    auto untraced_argv = common, traced_argv = common;
    untraced_argv.push_back("--no-trace");
    traced_argv.insert(traced_argv.end(), {"--out", dir});
    Proc untraced, traced;
    if (r % 2 == 0) {  // alternated: a machine getting busier weighs on both alike
      untraced = spawn(untraced_argv, true), traced = spawn(traced_argv, true);
    } else {
      traced = spawn(traced_argv, true), untraced = spawn(untraced_argv, true);
    }
    const Loop u = loop_of(untraced, "the untraced run"), t = loop_of(traced, "the traced run");
    cpu_u.push_back(u.cpu_s), cpu_t.push_back(t.cpu_s), wall_u.push_back(u.wall_s), wall_t.push_back(t.wall_s);
    cpu_ratio.push_back(t.cpu_s / u.cpu_s), wall_ratio.push_back(t.wall_s / u.wall_s);
    proc_ratio.push_back(traced.cpu_s / untraced.cpu_s);
  }
  uintmax_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) bytes += e.file_size();
  const Proc check = spawn({checker, dir}, true);
  const size_t v = check.out.find("verdict: ");
  const std::string verdict = v == std::string::npos ? "(no verdict line)" : check.out.substr(v, check.out.find('\n', v) - v);
  std::printf("recorder_course: MLP 32-128-128-10 (22K parameters), %lld ranks (Gloo, one thread each), 2 micro-batches "
              "of 32, %lld steps, %lld runs alternated, on %d cores\n",
              static_cast<long long>(ws), static_cast<long long>(steps), static_cast<long long>(runs), available_cores());
  std::printf("  training loop, CPU (all ranks): %.2f s untraced, %.2f s traced: %.2fx (median of the runs' ratios)\n",
              median(cpu_u), median(cpu_t), median(cpu_ratio));
  std::printf("  training loop, wall (rank 0):   %.2f s untraced, %.2f s traced: %.2fx\n", median(wall_u), median(wall_t),
              median(wall_ratio));
  std::printf("  whole processes, CPU:           %.2fx (start, imports, init and close() included)\n", median(proc_ratio));
  std::printf("  trace: %.1f MB; ddp_check %.2f s, exit %d, %s\n", bytes / 1e6, check.seconds, check.status, verdict.c_str());
  fs::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("recorder_course", argc, argv, run); }
