#include "bench/sim_step_measure.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "src/collective/allreduce.h"
#include "src/ddp/hooked_sync.h"
#include "src/ddp/trainer.h"
#include "src/tensor/gemm.h"
#include "src/gpt/train.h"
#include "src/base/parallel.h"

namespace ddplab::bench {

namespace {

using Clock = std::chrono::steady_clock;

long peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

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


// The simulator's step as run_epochs runs it: replicas side by side, then the pooled all-reduce, then the
// replicas' optimizer steps side by side.
Measured measure(const Case& c, int threads, const std::string& hook) {
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

}  // namespace ddplab::bench
