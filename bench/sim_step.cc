// bazel run //bench:sim_step -- one simulated DDP step (every replica's forward + backward, bucketed
// predivide ring all-reduce, SGD step), timed, next to PyTorch doing the same simulation by hand as
// notebook 000 does (bench/sim_step_reference.py, run in the same invocation). One thread each.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/collective/allreduce.h"
#include "src/ddp/trainer.h"

namespace {

using namespace ddplab;

long peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

struct Case {
  std::string name;
  std::vector<int64_t> layers;
  int64_t replicas, batch, steps;
};

struct Measured {
  double median_ms;
  long rss_after_first_mb, rss_after_last_mb;
};

Measured measure(const Case& c) {
  ddp::Config cfg;
  cfg.world_size = c.replicas;
  cfg.layers = c.layers;
  cfg.samples = c.replicas * c.batch;
  cfg.batch_size = c.batch;
  cfg.shuffle = false;
  Generator gen;
  const Dataset data = ddp::make_dataset(cfg, gen);
  std::vector<std::unique_ptr<ddp::Replica>> reps;
  for (int64_t r = 0; r < c.replicas; ++r) {
    reps.push_back(std::make_unique<ddp::Replica>(cfg, r));
    reps.back()->reducer =
        std::make_unique<ddp::Reducer>(reps.back()->model.parameters(), cfg.world_size, cfg.bucket_cap_mb, cfg.average);
  }
  std::vector<std::vector<int64_t>> batch(static_cast<size_t>(c.replicas));
  for (int64_t r = 0; r < c.replicas; ++r) {
    for (int64_t i = 0; i < c.batch; ++i) batch[static_cast<size_t>(r)].push_back(r * c.batch + i);
  }
  std::vector<double> times;
  Measured m{};
  ddp::InProcessAllreduce allreduce;
  for (int64_t s = 0; s < c.steps + 1; ++s) {  // step 0 warms up (and rebuilds the buckets)
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& rep : reps) rep->forward_backward(data, batch[static_cast<size_t>(rep->rank)]);
    std::vector<ddp::Reducer*> reducers;
    for (auto& rep : reps) reducers.push_back(rep->reducer.get());
    allreduce.run(reducers, collective::Algorithm::ring);
    for (auto& rep : reps) {
      rep->reducer->finish_sync();
      rep->optimizer->step();
      rep->optimizer->zero_grad(true);
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) times.push_back(ms);
    if (s == 1) m.rss_after_first_mb = peak_rss_mb();
  }
  m.rss_after_last_mb = peak_rss_mb();
  std::sort(times.begin(), times.end());
  m.median_ms = times[times.size() / 2];
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string reference = argc > 1 ? argv[1] : "bench/sim_step_reference.py";
  const std::vector<Case> cases = {
      {"notebook 6-4-2, 2 replicas, batch 32", {6, 4, 2}, 2, 32, 2000},
      {"MLP 1024-4096-4096-1024, 8 replicas, batch 64", {1024, 4096, 4096, 1024}, 8, 64, 3}};
  fmt::print("{:<48} {:>14} {:>14} {:>10}   peak RSS after step 1 / last\n", "one simulated DDP step", "ddplab ms",
             "PyTorch ms", "speedup");
  for (const Case& c : cases) {
    const Measured m = measure(c);
    // The PyTorch reference, same configuration, same machine, right now.
    // OPENBLAS_NUM_THREADS=1: torch.set_num_threads(1) alone leaves OpenBLAS free to use every core.
    const std::string cmd =
        fmt::format("OPENBLAS_NUM_THREADS=1 /usr/bin/python3 {} --layers {} --replicas {} --batch {} --steps {} 2>&1",
                    reference, fmt::join(c.layers, ","), c.replicas, c.batch, c.steps);
    double torch_ms = -1;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char line[256];
      while (std::fgets(line, sizeof line, p)) std::sscanf(line, "median_ms %lf", &torch_ms);
      pclose(p);
    }
    fmt::print("{:<48} {:>14.4f} {:>14} {:>10}   {} MB / {} MB\n", c.name, m.median_ms,
               torch_ms > 0 ? fmt::format("{:.4f}", torch_ms) : "n/a",
               torch_ms > 0 ? fmt::format("{:.1f}x", torch_ms / m.median_ms) : "n/a", m.rss_after_first_mb,
               m.rss_after_last_mb);
  }
  return 0;
}
