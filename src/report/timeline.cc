#include "src/report/timeline.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/base/io.h"
#include "src/ddp/reducer.h"
#include "src/ddp/trainer.h"
#include "src/gpt/model.h"
#include "src/model/spec.h"

namespace ddplab {

double ring_allreduce_us(size_t bytes, int64_t world_size, const CostModel& m) {
  if (world_size <= 1) return 0.0;
  const double n = static_cast<double>(world_size);
  const double bytes_per_us = m.link_gbps * 1e9 / 8.0 / 1e6;
  return 2.0 * (n - 1.0) * m.link_latency_us + ring_bytes_per_rank(bytes, world_size) / bytes_per_us;
}

double ring_bytes_per_rank(size_t bytes, int64_t world_size) {
  const double n = static_cast<double>(world_size);
  return world_size <= 1 ? 0.0 : 2.0 * (n - 1.0) / n * static_cast<double>(bytes);
}

namespace {

// A layer with parameters, in forward order: which of the model's parameters it holds and its forward FLOPs
// per sample: 2 x (its parameters) x (the positions it applies them at: 1 for a Linear on vectors, H x W
// for a conv, the tokens for the GPT). Layers without parameters (ReLU, pooling) and attention's own
// products are not counted: a cost model, not a measurement.
struct LayerWork {
  std::string name;
  std::vector<size_t> params;
  double flops_per_sample = 0;
};

LayerWork work_of(Module& layer, double positions, const std::vector<Parameter*>& all) {
  LayerWork w;
  for (Parameter* p : layer.parameters()) {
    const auto it = std::find(all.begin(), all.end(), p);
    if (it != all.end()) w.params.push_back(static_cast<size_t>(it - all.begin()));
    w.flops_per_sample += 2.0 * positions * static_cast<double>(p->numel());
    if (w.name.empty()) w.name = p->name.substr(0, p->name.rfind('.'));
  }
  return w;
}

// The model's layers with parameters, forward order; `params` receives the model's parameters (DDP's order).
struct Layers {
  std::vector<LayerWork> work;
  std::vector<Parameter*> params;
};

}  // namespace

Timeline build_timeline(const ddp::Config& cfg, const CostModel& m) {
  // Bucket layouts of iteration 0 and after the rebuild, from a real Reducer over the real model's parameters
  // (only their shapes and names matter: nothing is drawn).
  Generator gen;
  Layers layers;
  std::unique_ptr<gpt::Gpt> gpt_model;
  Sequential seq;
  if (cfg.is_gpt()) {
    gpt_model = std::make_unique<gpt::Gpt>(cfg.gpt, gen, false);
    layers.params = gpt_model->parameters();
    const auto tokens = static_cast<double>(cfg.gpt.block_size);
    apply(gpt_model->module(), [&](Module& mod) {
      if (!mod.children().empty() || mod.parameters().empty()) return;
      layers.work.push_back(work_of(mod, tokens, layers.params));
    });
  } else {
    const ModelPlan plan = plan_model(cfg.model_spec(), cfg.sample_shape());
    seq = build_model(plan, cfg.is_mlp() ? "layers" : "", gen, false);
    layers.params = seq.parameters();
    for (size_t i = 0; i < seq.size(); ++i) {
      const auto ps = seq[i].parameters();
      if (ps.empty()) continue;
      double out = 1;
      for (int64_t d : plan.shapes[i]) out *= static_cast<double>(d);
      layers.work.push_back(work_of(seq[i], out / static_cast<double>(ps[0]->shape[0]), layers.params));
    }
  }
  const std::vector<Parameter*>& params = layers.params;
  ddp::Reducer reducer(params, cfg.world_size, cfg.bucket_cap_mb, cfg.average);
  // find_unused_parameters=True (1.13): size-limited buckets from iteration 0, never rebuilt
  const bool rebuilds = !cfg.find_unused_parameters || cfg.static_graph;
  if (!rebuilds) reducer.use_size_limited_initial_buckets();
  const double flop_us = m.compute_gflops * 1e3;  // FLOPs per microsecond
  const auto B = static_cast<double>(cfg.batch_size);

  Timeline t;
  double now = 0.0;
  for (int iteration = 0; iteration < 2; ++iteration) {
    if (iteration == 1 && rebuilds && !cfg.static_graph) reducer.finish_sync();  // static_graph: one iteration later
    std::vector<TraceEvent> ev;
    const double step_start = now;
    for (const LayerWork& w : layers.work) {  // forward
      const double d = B * w.flops_per_sample / flop_us;
      ev.push_back({"forward " + w.name, "compute", 'X', now, d, 0, 0});
      now += d;
    }
    const double backward_start = now;
    std::vector<double> ready(params.size(), 0.0);
    for (size_t l = layers.work.size(); l-- > 0;) {  // backward: twice the forward (grad input + grad weight)
      const LayerWork& w = layers.work[l];
      const double d = 2.0 * B * w.flops_per_sample / flop_us;
      ev.push_back({"backward " + w.name, "compute", 'X', now, d, 0, 0});
      now += d;
      // a parameter's gradient is ready when its last use in the backward is done (a tied weight: its first
      // use in the forward)
      for (size_t p : w.params) ready[p] = now;
    }
    const double backward_end = now;
    StepCost cost;
    cost.backward_us = backward_end - backward_start;
    cost.buckets = reducer.num_buckets();
    double comm_free = backward_start;
    for (size_t j = 0; j < reducer.num_buckets(); ++j) {
      const ddp::Bucket& b = reducer.bucket(j);
      double r = 0.0;
      for (size_t p : b.params) r = std::max(r, ready[p]);
      ev.push_back({fmt::format("bucket {} ready", j), "ddp", 'i', r, 0.0, 0, 1});
      const double start = std::max(r, comm_free);
      const double d = ring_allreduce_us(b.numel * sizeof(float), cfg.world_size, m);
      if (d > 0) {
        ev.push_back({fmt::format("all-reduce bucket {} ({} floats)", j, b.numel), "comm", 'X', start, d, 0, 1});
      }
      comm_free = start + d;
      cost.comm_us += d;
      cost.bucket_times.push_back({b.numel, r - backward_start, start - backward_start, d});
      // Hidden = the part of this all-reduce that runs while backward is still computing.
      cost.hidden_us += std::max(0.0, std::min(start + d, backward_end) - start);
    }
    double n_params = 0;
    for (Parameter* p : params) n_params += static_cast<double>(p->numel());
    const double opt_start = std::max(backward_end, comm_free);
    const double opt_d = (cfg.optimizer == ddp::OptimizerKind::adam ? 10.0 : 2.0) * n_params / flop_us;
    ev.push_back({"optimizer step", "compute", 'X', opt_start, opt_d, 0, 0});
    now = opt_start + opt_d;
    cost.step_us = now - step_start;
    ev.insert(ev.begin(),
              {fmt::format("iteration {} ({} bucket{})", iteration, cost.buckets, cost.buckets == 1 ? "" : "s"), "step",
               'X', step_start, cost.step_us, 0, 0});
    for (int64_t rank = 0; rank < cfg.world_size; ++rank) {  // every rank runs the same schedule
      for (TraceEvent e : ev) {
        e.pid = static_cast<int>(rank);
        t.events.push_back(e);
      }
    }
    t.steps.push_back(cost);
  }
  return t;
}

std::string trace_json(const Timeline& t) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  int max_pid = 0;
  for (const TraceEvent& e : t.events) max_pid = std::max(max_pid, e.pid);
  for (int pid = 0; pid <= max_pid; ++pid) {
    out += fmt::format(
        "{{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": {0}, \"tid\": 0, "
        "\"args\": {{\"name\": \"rank{0}\"}}}},\n",
        pid);
    out += fmt::format(
        "{{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": {}, \"tid\": 0, "
        "\"args\": {{\"name\": \"compute\"}}}},\n",
        pid);
    out += fmt::format(
        "{{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": {}, \"tid\": 1, "
        "\"args\": {{\"name\": \"communication\"}}}},\n",
        pid);
  }
  for (size_t i = 0; i < t.events.size(); ++i) {
    const TraceEvent& e = t.events[i];
    out +=
        fmt::format("{{\"name\": \"{}\", \"cat\": \"{}\", \"ph\": \"{}\", \"ts\": {:.3f}, ", e.name, e.cat, e.ph, e.ts);
    out += e.ph == 'X' ? fmt::format("\"dur\": {:.3f}, ", e.dur) : std::string("\"s\": \"t\", ");
    out += fmt::format("\"pid\": {}, \"tid\": {}}}{}\n", e.pid, e.tid, i + 1 < t.events.size() ? "," : "");
  }
  return out + "]}\n";
}

std::string timeline_summary(const Timeline& t, int64_t world_size) {
  std::string out;
  for (size_t i = 0; i < t.steps.size(); ++i) {
    const StepCost& s = t.steps[i];
    out += fmt::format("timeline iteration {} ({} bucket{}): simulated step {:.1f} us, communication {:.1f} us, ", i,
                       s.buckets, s.buckets == 1 ? "" : "s", s.step_us, s.comm_us);
    out += world_size <= 1 || s.comm_us == 0
               ? std::string("no communication (world_size 1)\n")
               : fmt::format("{:.0f}% of it hidden behind backward\n", 100.0 * s.hidden_us / s.comm_us);
    if (world_size <= 1) continue;
    size_t floats = 0;
    for (const BucketTime& b : s.bucket_times) floats += b.floats;
    out += fmt::format("  each rank sends {:.0f} bytes (the ring's 2 x ({}-1)/{} of the {} gradient floats' {} bytes)\n",
                       ring_bytes_per_rank(floats * sizeof(float), world_size), world_size, world_size, floats,
                       floats * sizeof(float));
    out += fmt::format("  backward {:.1f} us; each bucket's all-reduce starts once its last gradient is ready and "
                       "the one before it is done:\n",
                       s.backward_us);
    for (size_t j = 0; j < s.bucket_times.size(); ++j) {
      const BucketTime& b = s.bucket_times[j];
      const double end = b.start_us + b.dur_us;
      out += fmt::format("  bucket {} ({} floats): ready at {:.1f} us into the backward, all-reduce {:.1f}-{:.1f} us ({})\n",
                         j, b.floats, b.ready_us, b.start_us, end,
                         end <= s.backward_us           ? "hidden behind the backward"
                         : b.start_us >= s.backward_us ? "after the backward"
                                                       : "partly hidden");
    }
  }
  return out;
}

CostModel cost_model_from_flags(const Flags& flags) {
  CostModel m;
  m.link_latency_us = flags.get_double("link-latency-us", m.link_latency_us, 0.0, 1e9);
  m.link_gbps = flags.get_double("link-gbps", m.link_gbps, 1e-6, 1e9);
  m.compute_gflops = flags.get_double("compute-gflops", m.compute_gflops, 1e-6, 1e9);
  return m;
}

std::string write_trace(const std::string& path, const ddp::Config& cfg, const CostModel& m) {
  const Timeline t = build_timeline(cfg, m);
  if (std::string why = write_file_atomic(path, trace_json(t)); !why.empty()) return why;
  fmt::print("\n{}trace written to {} (open in https://ui.perfetto.dev or chrome://tracing)\n",
             timeline_summary(t, cfg.world_size), path);
  return "";
}

}  // namespace ddplab
