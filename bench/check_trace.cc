// bazel run //bench:check_trace -- [--params-m 25] [--world-size 4] [--steps 10] [--batch 8] [--model mlp|cnn]
//                                    [--runs 3] [--dir DIR] [--full true]
// What ddp_check costs, measured against what it cannot do without, in the same run:
//  1. the recorder's overhead: bench/check_trace_run.py (an MLP of --params-m million parameters, DDP over
//     Gloo, --world-size CPU ranks) timed per training step untraced and traced (its median, rank 0);
//  2. checking the trace: `ddp_check DIR` against `cat` of the same files into /dev/null, both whole
//     processes, alternated --runs times (median), and ddp_check's peak resident memory against the bytes of
//     one step of all ranks' files (what streaming step by step should hold).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/proc.h"
#include "src/base/flags.h"
#include "src/base/parallel.h"

namespace {

using namespace ddplab;
using bench::Proc, bench::median, bench::spawn;
namespace fs = std::filesystem;

double ms_per_step(const Proc& p, const std::string& what) {
  const size_t at = p.out.find("train ms/step ");
  if (p.status != 0 || at == std::string::npos) throw RunError(what + " failed (exit " + std::to_string(p.status) + ")");
  return std::stod(p.out.substr(at + 14));
}

int run(int argc, char** argv) {
  Flags f(argc, argv, {"params-m", "world-size", "steps", "batch", "model", "runs", "dir", "python", "full"});
  if (f.positional().size() != 2) throw UsageError("usage: check_trace RUN_SCRIPT DDP_CHECK [flags] (bazel run passes both)");
  const std::string script = f.positional()[0], checker = fs::absolute(f.positional()[1]).string();
  const double params_m = f.get_double("params-m", 25.0, 0.01, 1000.0);
  const int64_t ws = f.get_int("world-size", 4, 1, 16), steps = f.get_int("steps", 10, 2, 1000);
  const int64_t runs = f.get_int("runs", 3, 1, 100);
  const int64_t batch = f.get_int("batch", 8, 1, 4096);  // samples per rank and step
  const std::string model = f.get_string("model", "mlp");
  if (model != "mlp" && model != "cnn") throw UsageError("--model must be mlp or cnn, not '" + model + "'");
  const std::string dir = f.get_string("dir", "/tmp/ddplab_check_trace_bench");
  const std::string python = f.get_string("python", "/usr/bin/python3");
  const bool full = f.get_bool("full", false);  // DDPTrace(..., full=True): every value, no digests
  fs::remove_all(dir);
  const std::vector<std::string> common = {python,         script, "--params-m", fmt::format("{}", params_m),
                                           "--world-size", std::to_string(ws), "--steps", std::to_string(steps),
                                           "--batch",      std::to_string(batch), "--model", model};
  auto untraced_argv = common, traced_argv = common;
  untraced_argv.push_back("--no-trace");
  traced_argv.insert(traced_argv.end(), {"--out", dir});
  if (full) traced_argv.push_back("--full");
  const Proc untraced = spawn(untraced_argv, true);
  const Proc traced = spawn(traced_argv, true);
  const double ms_untraced = ms_per_step(untraced, "the untraced run"), ms_traced = ms_per_step(traced, "the traced run");

  std::vector<std::string> files;
  uintmax_t total = 0;
  std::map<std::string, uintmax_t> step_bytes;  // per step file name, all ranks together
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    files.push_back(e.path().string());
    total += e.file_size();
    if (e.path().extension() == ".safetensors") step_bytes[e.path().filename().string()] += e.file_size();
  }
  uintmax_t one_step = 0;  // the largest step
  for (const auto& [name, bytes] : step_bytes) one_step = std::max(one_step, bytes);
  // A later step (the first holds every value, also with digests) against the local gradients it must hold.
  std::vector<double> later;
  for (const auto& [name, bytes] : step_bytes)
    if (name != step_bytes.begin()->first) later.push_back(static_cast<double>(bytes));
  std::sort(files.begin(), files.end());
  std::vector<double> cat_s, check_s;
  long check_rss_kb = 0;
  for (int64_t r = 0; r < runs; ++r) {
    std::vector<std::string> cat = {"cat"};
    cat.insert(cat.end(), files.begin(), files.end());
    const Proc c = spawn(cat, false);
    if (c.status != 0) throw RunError("cat failed");
    cat_s.push_back(c.seconds);
    const Proc k = spawn({checker, dir, "--quiet"}, true);
    if (k.status != 0) throw RunError("ddp_check found problems in the bench's clean run:\n" + k.out);
    check_s.push_back(k.seconds);
    check_rss_kb = std::max(check_rss_kb, k.max_rss_kb);
  }
  const std::string params = untraced.out.substr(untraced.out.find("params ") + 7);
  std::printf("check_trace: %s parameters (%s), %lld ranks (Gloo, one thread each), batch %lld, %lld steps, every "
              "step recorded\n",
              params.substr(0, params.find(' ')).c_str(), model.c_str(), static_cast<long long>(ws),
              static_cast<long long>(batch), static_cast<long long>(steps));
  std::printf("  recorder: train step %.1f ms untraced, %.1f ms traced: %.2fx\n", ms_untraced, ms_traced,
              ms_traced / ms_untraced);
  std::printf("  trace (%s): %zu files, %.2f GB (the largest step, all ranks: %.2f GB)\n", full ? "full=True" : "digests",
              files.size(), total / 1e9, one_step / 1e9);
  const double local_bytes = 4.0 * std::stod(params.substr(0, params.find(' '))) * static_cast<double>(ws);
  if (!later.empty())
    std::printf("  a step after the first, all ranks: %.2f GB median = %.2fx the local gradients' bytes\n",
                median(later) / 1e9, median(later) / local_bytes);
  std::printf("  read it (cat > /dev/null): %.2f s median of %lld (%.2f GB/s)\n", median(cat_s),
              static_cast<long long>(runs), total / 1e9 / median(cat_s));
  std::printf("  ddp_check:                 %.2f s median of %lld: %.2fx the read; peak RSS %.2f GB = %.2fx one step\n",
              median(check_s), static_cast<long long>(runs), median(check_s) / median(cat_s), check_rss_kb / 1e6,
              check_rss_kb * 1e3 / static_cast<double>(one_step));
  // Issue 39's goal: checking takes no longer than the traced training it checks (its steps at the traced pace).
  const double trained_s = ms_traced * static_cast<double>(steps) / 1e3;
  std::printf("  ddp_check against the traced run's training (%lld steps x %.1f ms = %.2f s): %.2fx, on %d cores\n",
              static_cast<long long>(steps), ms_traced, trained_s, median(check_s) / trained_s, available_cores());
  fs::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("check_trace", argc, argv, run); }
