#include "bench/sim_step_torch.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

namespace ddplab::bench {

namespace {

double run_reference(const std::string& cmd) {
  double ms = -1;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, p)) std::sscanf(line, "median_ms %lf", &ms);
    pclose(p);
  }
  return ms;
}

}  // namespace

double torch_gpt_ms(const std::string& reference, const GptCase& c, int threads) {
  return run_reference(
      fmt::format("OPENBLAS_NUM_THREADS={0} /usr/bin/python3 {1} --model gpt --n-layer {2} --n-head {3} --n-embd {4} "
                  "--block-size {5} --replicas {6} --batch {7} --steps {8} --threads {0} 2>&1",
                  threads, reference, c.n_layer, c.n_head, c.n_embd, c.block, c.ranks, c.batch, c.steps));
}

double torch_ms(const std::string& reference, const Case& c, int threads) {
  // OPENBLAS_NUM_THREADS as well: torch.set_num_threads alone leaves OpenBLAS free to use every core.
  const std::string cmd = fmt::format(
      "OPENBLAS_NUM_THREADS={0} /usr/bin/python3 {1} {2} --replicas {3} --batch {4} --steps {5} --threads {0} 2>&1",
      threads, reference, c.cnn() ? "--model cnn" : fmt::format("--layers {}", fmt::join(c.layers, ",")), c.replicas,
      c.batch, c.steps);
  return run_reference(cmd);
}

// --comm-hook: ddplab's DDP step with a comm hook against torch 1.13 DDP with the same hook registered, on real
// Gloo ranks (one single-threaded process per rank, bench/sim_step_reference.py --ddp); ddplab runs the ranks side
// by side on one thread per rank. The MLP's 201,226 gradients fit one bucket (0.77 MB < the first rebuilt
// bucket's 1 MiB): torch 1.13's powerSGD_hook on Gloo runs with one bucket only (README.md, PowerSGD).
// Same data, initialisation and batches on both sides, so the parameters after the run are compared bitwise.
void run_hooks(const std::string& reference, const std::vector<std::string>& hooks) {
  const Case c{"MLP 128-384-384-10 relu, 2 ranks, batch 64", {128, 384, 384, 10}, 2, 64, 50, true};
  const int threads = static_cast<int>(c.replicas);
  fmt::print("{}, {} steps after one warm-up; ddplab {} threads, PyTorch {} Gloo processes of 1 thread\n", c.name,
             c.steps, threads, c.replicas);
  fmt::print("{:<14} {:>11} {:>11} {:>15}   parameters after {} steps, every rank\n", "--comm-hook", "ddplab ms",
             "PyTorch ms", "PyTorch/ddplab", c.steps + 1);
  // The first case measured in a process ran at 6-8 ms whichever hook it was, the later ones at ~2.6 ms (four
  // single-hook runs against `all`): one untimed pass first.
  measure(c, threads, hooks.front());
  for (const std::string& hook : hooks) {
    const Measured m = measure(c, threads, hook);
    const std::string dump = fmt::format("/tmp/sim_step_hook.{}.{}.f32", getpid(), hook);
    const double t =
        run_reference(fmt::format("OPENBLAS_NUM_THREADS=1 timeout 600 /usr/bin/python3 {} --ddp --layers {} "
                                  "--activation relu --replicas {} --batch {} "
                                  "--steps {} --comm-hook {} --dump {} 2>&1",
                                  reference, fmt::join(c.layers, ","), c.replicas, c.batch, c.steps, hook, dump));
    std::ifstream in(dump, std::ios::binary);
    const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::remove(dump.c_str());
    size_t differ = 0;
    const size_t bytes = m.params.size() * sizeof(float);
    if (got.size() == bytes) {
      for (size_t i = 0; i < m.params.size(); ++i) differ += std::memcmp(&m.params[i], got.data() + i * 4, 4) != 0;
    }
    fmt::print("{:<14} {:>11.4f} {:>11} {:>15}   {}\n", hook, m.median_ms, t > 0 ? fmt::format("{:.4f}", t) : "n/a",
               t > 0 ? fmt::format("{:.2f}x", t / m.median_ms) : "n/a",
               got.size() != bytes ? fmt::format("n/a (PyTorch wrote {} bytes, expected {})", got.size(), bytes)
               : differ == 0       ? fmt::format("bitwise equal ({} floats)", m.params.size())
                                   : fmt::format("DIFFERENT: {} of {} floats", differ, m.params.size()));
  }
}

}  // namespace ddplab::bench
