// bazel run //bench:sim_step -- one simulated DDP step (every replica's forward + backward, bucketed
// predivide ring all-reduce, SGD step), timed with 1 thread and with every core (--threads), next to
// PyTorch doing the same simulation by hand as notebook 000 does (bench/sim_step_reference.py, run in the
// same invocation with the same thread count). It also measures the machine's FMA peak as ddplab can use
// it: a single-threaded OpenBLAS sgemm, times the cores; and prints the step's GFLOP/s and share of it
// (MLP cases). The cnn cases are the digits CNN (--model cnn --dataset digits) in training mode; the gpt case is
// issue 17's tiny GPT (nanoGPT's train.py step under simulated DDP, src/gpt/train.h).
// `bazel run //bench:sim_step -- --model cnn` (or mlp, gpt) runs one model's cases only.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/collective/allreduce.h"
#include "src/ddp/hooked_sync.h"
#include "src/ddp/trainer.h"
#include "src/gemm.h"
#include "src/gpt/train.h"
#include "src/parallel.h"

namespace {

using namespace ddplab;
using Clock = std::chrono::steady_clock;

long peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Case {
  std::string name;
  std::vector<int64_t> layers;  // the MLP's sizes; empty for the cnn
  int64_t replicas, batch, steps;
  bool relu = false;
  bool cnn() const { return layers.empty(); }
};

// Forward 2·B·in·out per Linear, backward the same for grad_weight and (all but the first layer) grad_input.
double step_flops(const Case& c) {
  double f = 0;
  for (size_t i = 0; i + 1 < c.layers.size(); ++i) {
    f += 2.0 * static_cast<double>(c.batch * c.layers[i] * c.layers[i + 1]) * (i == 0 ? 2 : 3);
  }
  return f * static_cast<double>(c.replicas);
}

// Best of 3 single-threaded sgemm calls of 2048^3 (Linear's forward call), in GFLOP/s.
double sgemm_gflops_one_core() {
  const int64_t n = 2048;
  std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(a), c(a);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    gemm::linear_forward(a.data(), b.data(), c.data(), n, n, n);
    best = std::max(best, 2.0 * n * n * n / (ms_since(t0) * 1e6));
  }
  return best;
}

// The step's own sgemm calls (forward, grad_weight, grad_input per Linear, as one replica makes them), one
// thread, best of 3: what these shapes allow on one core. Skinny products (batch 64) run below 2048^3.
double step_shapes_gflops_one_core(const Case& c) {
  double best = 0;
  std::vector<std::vector<float>> w, act;
  for (size_t i = 0; i + 1 < c.layers.size(); ++i)
    w.emplace_back(static_cast<size_t>(c.layers[i] * c.layers[i + 1]), 0.01f);
  for (int64_t width : c.layers) act.emplace_back(static_cast<size_t>(c.batch * width), 0.5f);
  std::vector<float> gw(*std::max_element(w.begin(), w.end(), [](auto& a, auto& b) { return a.size() < b.size(); }));
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    for (size_t i = 0; i + 1 < c.layers.size(); ++i) {
      const int64_t in = c.layers[i], out = c.layers[i + 1];
      gemm::linear_forward(act[i].data(), w[i].data(), act[i + 1].data(), c.batch, in, out);
      gemm::linear_grad_weight(act[i + 1].data(), act[i].data(), gw.data(), c.batch, in, out);
      if (i > 0) gemm::linear_grad_input(act[i + 1].data(), w[i].data(), act[i].data(), c.batch, in, out);
    }
    best = std::max(best, step_flops(c) / static_cast<double>(c.replicas) / (ms_since(t0) * 1e6));
  }
  return best;
}

struct Measured {
  double median_ms;
  long rss_after_first_mb, rss_after_last_mb;
  std::vector<float> params;  // every rank's parameters after the last step (gpt, --comm-hook)
};

// The simulator's step as run_epochs runs it: replicas side by side, then the pooled all-reduce, then the
// replicas' optimizer steps side by side.
Measured measure(const Case& c, int threads, const std::string& hook = "none") {
  ddp::Config cfg;
  cfg.comm_hook.name = hook;  // init_ddp registers it on every rank's Reducer
  cfg.relu = c.relu;
  cfg.world_size = c.replicas;
  cfg.batch_size = c.batch;
  cfg.shuffle = false;
  if (c.cnn()) {  // as the reference: cross-entropy, SGD with momentum 0.9
    cfg.model = "cnn";
    cfg.dataset = ddp::DatasetKind::digits;
    cfg.loss = ddp::LossKind::ce;
    cfg.momentum = 0.9;
  } else {
    cfg.layers = c.layers;
    cfg.samples = c.replicas * c.batch;
  }
  Generator gen;
  const Dataset data = ddp::make_dataset(cfg, gen);
  std::vector<std::unique_ptr<ddp::Replica>> reps;
  for (int64_t r = 0; r < c.replicas; ++r) {
    reps.push_back(std::make_unique<ddp::Replica>(cfg, r));
    ddp::init_ddp(cfg, *reps.back(), [](ddp::TrainingRank&) {});
  }
  std::vector<std::vector<int64_t>> batch(static_cast<size_t>(c.replicas));
  for (int64_t r = 0; r < c.replicas; ++r) {
    for (int64_t i = 0; i < c.batch; ++i) batch[static_cast<size_t>(r)].push_back(r * c.batch + i);
  }
  ThreadPool pool(threads);
  // parallel_for's work per replica: the MLP's flops; the cnn's are not counted, and its replica is worth a thread.
  const double work = c.cnn() ? 1e9 : step_flops(c) / static_cast<double>(c.replicas);
  std::vector<double> times;
  Measured m{};
  ddp::InProcessAllreduce allreduce;
  // With a hook, run_epochs' path: each rank's hook on a thread of its own over a LocalGroup (hooked_sync.h).
  std::unique_ptr<ddp::HookedAllreduce> hooked;
  if (hook != "none") hooked = std::make_unique<ddp::HookedAllreduce>(static_cast<int>(c.replicas), cfg.allreduce);
  std::vector<ddp::Reducer*> reducers;
  for (auto& rep : reps) reducers.push_back(rep->reducer.get());
  for (int64_t s = 0; s < c.steps + 1; ++s) {  // step 0 warms up (and rebuilds the buckets)
    const auto t0 = Clock::now();
    // DDP's broadcast_buffers before each training forward (the cnn's BatchNorm buffers).
    for (size_t r = 1; r < reps.size(); ++r) ddp::copy_buffers(reps[0]->model, reps[r]->model);
    parallel_for(&pool, reps.size(), work, [&](size_t r) { reps[r]->forward_backward(data, batch[r]); });
    if (hooked) {
      hooked->run(reducers);
    } else {
      allreduce.run(reducers, collective::Algorithm::ring, nullptr, &pool);
    }
    parallel_for(&pool, reps.size(), work, [&](size_t r) {
      reps[r]->reducer->finish_sync(reps[r]->ready);
      reps[r]->optimizer->step();
      reps[r]->optimizer->zero_grad(true);
    });
    if (s > 0) times.push_back(ms_since(t0));
    if (s == 1) m.rss_after_first_mb = peak_rss_mb();
  }
  m.rss_after_last_mb = peak_rss_mb();
  std::sort(times.begin(), times.end());
  m.median_ms = times[times.size() / 2];
  for (auto& rep : reps) {  // every rank's parameters after the run, to compare with PyTorch's
    for (Parameter* p : rep->model.parameters()) m.params.insert(m.params.end(), p->data(), p->data() + p->numel());
  }
  return m;
}

// The tiny GPT of issue 17 (4 layers, 4 heads, n_embd 128, block 64, dropout 0, GPL-3 text), 2 simulated
// ranks of batch 8: nanoGPT's step as the training loop runs it (each rank's forward, the prefetch get_batch, the
// backward; the buckets' ring all-reduce; AdamW; zero_grad set_to_none). Ranks side by side on `threads` threads.
struct GptCase {
  std::string name = "tiny GPT 4x4x128, block 64, 2 ranks, batch 8";
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block = 64, ranks = 2, batch = 8, steps = 20;
};

Measured measure_gpt(const GptCase& c, int threads) {
  const TextData data = TextData::load(kTextDefaultPath);
  gpt::RunConfig cfg = ddp::gpt_config();
  cfg.gpt.vocab_size = data.vocab_size();
  cfg.gpt.n_layer = c.n_layer;
  cfg.gpt.n_head = c.n_head;
  cfg.gpt.n_embd = c.n_embd;
  cfg.gpt.block_size = c.block;
  cfg.batch_size = c.batch;
  cfg.world_size = c.ranks;
  cfg.steps = 1;  // run_training below is one optimizer step
  std::vector<std::unique_ptr<gpt::GptRank>> ranks;
  std::vector<ddp::TrainingRank*> local;
  for (int64_t r = 0; r < c.ranks; ++r) {
    ranks.push_back(std::make_unique<gpt::GptRank>(cfg, data, r));
    local.push_back(ranks.back().get());
  }
  for (auto& rk : ranks) {  // DDP's broadcast of rank 0's parameters
    ddp::init_ddp(cfg, *rk, [&](ddp::TrainingRank& to) { ddp::copy_parameters({&to}, *local[0]); });
    rk->start();
  }
  ThreadPool pool(threads);
  ddp::InProcessSync in_process(cfg, &pool);  // ranks side by side, the ring all-reduce, no hook
  const ddp::LoopSync sync = in_process.sync(false);
  std::vector<double> times;
  Measured m{};
  for (int64_t s = 0; s < c.steps + 1; ++s) {  // step 0 warms up (and rebuilds the buckets)
    const auto t0 = Clock::now();
    ddp::run_training(cfg, local, sync);
    if (s > 0) times.push_back(ms_since(t0));
    if (s == 1) m.rss_after_first_mb = peak_rss_mb();
  }
  m.rss_after_last_mb = peak_rss_mb();
  std::sort(times.begin(), times.end());
  m.median_ms = times[times.size() / 2];
  for (auto& rk : ranks) {  // every rank's parameters after the run, to compare across thread counts
    for (Parameter* p : rk->params) m.params.insert(m.params.end(), p->data(), p->data() + p->numel());
  }
  return m;
}

double run_reference(const std::string& cmd) {
  double ms = -1;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, p)) std::sscanf(line, "median_ms %lf", &ms);
    pclose(p);
  }
  return ms;
}

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

}  // namespace

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
