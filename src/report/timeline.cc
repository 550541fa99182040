#include "src/report/timeline.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/ddp/reducer.h"
#include "src/ddp/trainer.h"

namespace ddplab {

double ring_allreduce_us(size_t bytes, int64_t world_size, const CostModel& m) {
  if (world_size <= 1) return 0.0;
  const double n = static_cast<double>(world_size);
  const double bytes_per_us = m.link_gbps * 1e9 / 8.0 / 1e6;
  return 2.0 * (n - 1.0) * m.link_latency_us + 2.0 * (n - 1.0) / n * static_cast<double>(bytes) / bytes_per_us;
}

Timeline build_timeline(const ddp::Config& cfg, const CostModel& m) {
  // Bucket layouts of iteration 0 and after the rebuild, from a real Reducer over the real model.
  Generator gen;
  // Only the shapes and names matter here: the --model mlp layers (ddp_sim refuses --trace for other models).
  MLP model(cfg.layers, cfg.relu, MLP::sequential_names(cfg.layers.size() - 1, cfg.relu), gen);
  std::vector<Parameter*> params = model.parameters();
  ddp::Reducer reducer(params, cfg.world_size, cfg.bucket_cap_mb, cfg.average);
  const double flop_us = m.compute_gflops * 1e3;  // FLOPs per microsecond
  const auto B = static_cast<double>(cfg.batch_size);
  const size_t L = model.linears.size();

  Timeline t;
  double now = 0.0;
  for (int iteration = 0; iteration < 2; ++iteration) {
    if (iteration == 1) reducer.finish_sync();
    std::vector<TraceEvent> ev;
    const double step_start = now;
    for (size_t l = 0; l < L; ++l) {  // forward: 2*B*in*out FLOPs per Linear
      const Linear& lin = model.linears[l];
      const double d = 2.0 * B * static_cast<double>(lin.in_features * lin.out_features) / flop_us;
      ev.push_back({fmt::format("forward {}", lin.weight.name.substr(0, lin.weight.name.rfind('.'))), "compute", 'X',
                    now, d, 0, 0});
      now += d;
    }
    const double backward_start = now;
    std::vector<double> ready(params.size(), 0.0);
    for (size_t l = L; l-- > 0;) {  // backward: 4*B*in*out FLOPs (grad input + grad weight)
      const Linear& lin = model.linears[l];
      const double d = 4.0 * B * static_cast<double>(lin.in_features * lin.out_features) / flop_us;
      ev.push_back({fmt::format("backward {}", lin.weight.name.substr(0, lin.weight.name.rfind('.'))), "compute", 'X',
                    now, d, 0, 0});
      now += d;
      ready[2 * l] = ready[2 * l + 1] = now;  // weight and bias gradients ready when the layer is done
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
  }
  return out;
}

}  // namespace ddplab
