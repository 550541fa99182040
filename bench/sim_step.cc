// bazel run //bench:sim_step -- one simulated DDP step (every replica's forward + backward, bucketed
// predivide ring all-reduce, SGD step), timed with 1 thread and with every core (--threads), next to
// PyTorch doing the same simulation by hand as notebook 000 does (bench/sim_step_reference.py, run in the
// same invocation with the same thread count). It also measures the machine's FMA peak as ddplab can use
// it: a single-threaded OpenBLAS sgemm, times the cores; and prints the step's GFLOP/s and share of it
// (MLP cases). The cnn cases are the digits CNN (--model cnn --dataset digits) in training mode; the gpt case is
// issue 17's tiny GPT (nanoGPT's train.py step under simulated DDP, src/gpt/train.h).
// `bazel run //bench:sim_step -- --model cnn` (or mlp, gpt) runs one model's cases only.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/sim_step_measure.h"
#include "bench/sim_step_torch.h"
#include "src/base/parallel.h"

using namespace ddplab;
using namespace ddplab::bench;

int main(int argc, char** argv) {
  // sim_step [REFERENCE.py] [--model mlp|cnn|gpt] [--comm-hook none|allreduce|fp16-compress|powersgd|all]:
  // --model runs only that model's cases, --comm-hook only the hooked DDP step.
  std::string reference = "bench/sim_step_reference.py", model;
  std::vector<std::string> hooks;
  const std::vector<std::string> all_hooks = {"none", "allreduce", "fp16-compress", "powersgd"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string next = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--model" && (next == "mlp" || next == "cnn" || next == "gpt")) {
      model = argv[++i];
    } else if (a == "--comm-hook" && (next == "all" || std::count(all_hooks.begin(), all_hooks.end(), next))) {
      hooks = next == "all" ? all_hooks : std::vector<std::string>{next};
      ++i;
    } else if (a.rfind("--", 0) == 0) {
      fmt::print(stderr,
                 "sim_step: unknown argument '{}' (usage: sim_step [REFERENCE.py] [--model mlp|cnn|gpt] "
                 "[--comm-hook none|allreduce|fp16-compress|powersgd|all])\n",
                 a);
      return 2;
    } else {
      reference = a;
    }
  }
  if (!hooks.empty()) {
    run_hooks(reference, hooks);
    return 0;
  }
  const int cores = available_cores();
  const double core_gflops = sgemm_gflops_one_core();
  const double peak = core_gflops * cores;
  fmt::print(
      "FMA peak as measured: single-threaded OpenBLAS sgemm 2048^3 {:.1f} GFLOP/s x {} cores = {:.1f} GFLOP/s\n\n",
      core_gflops, cores, peak);
  const std::vector<Case> cases = {
      {"notebook 6-4-2, 2 replicas, batch 32", {6, 4, 2}, 2, 32, 2000},
      {"MLP 1024-4096-4096-1024, 8 replicas, batch 64", {1024, 4096, 4096, 1024}, 8, 64, 5},
      {"cnn on digits, 2 replicas, batch 32", {}, 2, 32, 1000},
      {"cnn on digits, 8 replicas, batch 64", {}, 8, 64, 200}};
  fmt::print("{:<46} {:>3} {:>11} {:>8} {:>7} {:>6} {:>11} {:>8}   peak RSS step 1 / last\n", "one simulated DDP step",
             "thr", "ddplab ms", "GFLOP/s", "% peak", "vs 1t", "PyTorch ms", "speedup");
  for (const Case& c : cases) {
    if (!model.empty() && (model == "gpt" || (model == "cnn") != c.cnn())) continue;
    if (!c.cnn()) {
      const double shapes = step_shapes_gflops_one_core(c);
      fmt::print("{:<46} sgemm at this step's own shapes, one core: {:.1f} GFLOP/s ({:.0f}% of the 2048^3 figure)\n",
                 c.name, shapes, 100.0 * shapes / core_gflops);
    }
    double one_thread_ms = 0;
    for (int threads : {1, cores}) {
      if (threads == 1 && cores == 1 && one_thread_ms > 0) continue;
      const Measured m = measure(c, threads);
      if (threads == 1) one_thread_ms = m.median_ms;
      const double gflops = step_flops(c) / (m.median_ms * 1e6);
      const double t = torch_ms(reference, c, threads);
      fmt::print("{:<46} {:>3} {:>11.4f} {:>8} {:>7} {:>5.2f}x {:>11} {:>8}   {} MB / {} MB\n", c.name, threads,
                 m.median_ms, c.cnn() ? "-" : fmt::format("{:.1f}", gflops),
                 c.cnn() ? "-" : fmt::format("{:.0f}%", 100.0 * gflops / (core_gflops * threads)),
                 one_thread_ms / m.median_ms, t > 0 ? fmt::format("{:.4f}", t) : "n/a",
                 t > 0 ? fmt::format("{:.2f}x", t / m.median_ms) : "n/a", m.rss_after_first_mb, m.rss_after_last_mb);
      if (cores == 1) break;
    }
  }
  if (model.empty() || model == "gpt") {
    // 1 thread, then every core: ddplab runs the ranks side by side (the loop's pool), PyTorch splits each op.
    const GptCase c;
    double one_thread_ms = 0;
    std::vector<float> one_thread_params;
    for (int threads : {1, cores}) {
      const Measured m = measure_gpt(c, threads);
      if (threads == 1) one_thread_ms = m.median_ms, one_thread_params = m.params;
      const double t = torch_gpt_ms(reference, c, threads);
      fmt::print("{:<46} {:>3} {:>11.4f} {:>8} {:>7} {:>5.2f}x {:>11} {:>8}   {} MB / {} MB\n", c.name, threads,
                 m.median_ms, "-", "-", one_thread_ms / m.median_ms, t > 0 ? fmt::format("{:.4f}", t) : "n/a",
                 t > 0 ? fmt::format("{:.2f}x", t / m.median_ms) : "n/a", m.rss_after_first_mb, m.rss_after_last_mb);
      if (threads > 1) {  // the same steps from the same seeds: the threads must not change a bit
        const bool same = m.params.size() == one_thread_params.size() &&
                          std::memcmp(m.params.data(), one_thread_params.data(), m.params.size() * sizeof(float)) == 0;
        fmt::print("{:<46} parameters after {} steps, {} threads vs 1: {} ({} floats)\n", c.name, c.steps + 1, threads,
                   same ? "bitwise equal" : "DIFFERENT", m.params.size());
      }
      if (cores == 1) break;
    }
  }
  return 0;
}
