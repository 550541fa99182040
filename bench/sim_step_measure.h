// bench/sim_step's measurements of ddplab: the cases it times, one simulated DDP step timed at a thread
// count (MLP, cnn, the tiny GPT), and the machine's sgemm peak as ddplab can use it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddplab::bench {

struct Case {
  std::string name;
  std::vector<int64_t> layers;  // the MLP's sizes; empty for the cnn
  int64_t replicas, batch, steps;
  bool relu = false;
  bool cnn() const { return layers.empty(); }
};

// Forward 2·B·in·out per Linear, backward the same for grad_weight and (all but the first layer) grad_input.
double step_flops(const Case& c);
// Best of 3 single-threaded sgemm calls of 2048^3 (Linear's forward call), in GFLOP/s.
double sgemm_gflops_one_core();
// The step's own sgemm calls, one thread, best of 3: what these shapes allow on one core.
double step_shapes_gflops_one_core(const Case& c);

struct Measured {
  double median_ms;
  long rss_after_first_mb, rss_after_last_mb;
  std::vector<float> params;  // every rank's parameters after the last step (gpt, --comm-hook)
};

// The simulator's step as run_epochs runs it, median of c.steps after one warm-up; `hook` as --comm-hook.
Measured measure(const Case& c, int threads, const std::string& hook = "none");

// The tiny GPT of issue 17 (4 layers, 4 heads, n_embd 128, block 64, dropout 0, GPL-3 text), 2 simulated
// ranks of batch 8: nanoGPT's step as the training loop runs it (each rank's forward, the prefetch get_batch, the
// backward; the buckets' ring all-reduce; AdamW; zero_grad set_to_none). Ranks side by side on `threads` threads.
struct GptCase {
  std::string name = "tiny GPT 4x4x128, block 64, 2 ranks, batch 8";
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block = 64, ranks = 2, batch = 8, steps = 20;
};

Measured measure_gpt(const GptCase& c, int threads);

}  // namespace ddplab::bench
