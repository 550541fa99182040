// speed: why is my DDP run slower than one GPU? One step's time under ddp_sim --trace's cost model, one device
// against DDP at the same batch per rank: the bytes each rank sends, how much of the all-reduce hides behind the
// backward, and what is left per epoch. The figures are the cost model's (assumed link and compute rates); the
// layouts and bytes are torch's (sim/questions/ddp_options.py measures them).
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "src/questions/topics.h"
#include "src/report/timeline.h"

namespace ddplab::questions {

void speed_defaults(ddp::Config& cfg) {
  cfg.world_size = 3;
  cfg.layers = {64, 512, 512, 512, 10};
}

CostModel& speed_cost_model() {
  static CostModel m;
  return m;
}

void speed_run(const ddp::Config& cfg) {
  const CostModel& m = speed_cost_model();
  const int64_t w = cfg.world_size, b = cfg.batch_size;
  const Timeline one = build_timeline(one_device(cfg, b), m), ddp = build_timeline(cfg, m);
  const StepCost& s1 = one.steps[1];
  const StepCost& s = ddp.steps[1];  // from iteration 1: the rebuilt buckets (static_graph: still iteration 0's)
  size_t floats = 0;
  for (const BucketTime& bt : s.bucket_times) floats += bt.floats;
  const double sent = ring_bytes_per_rank(floats * sizeof(float), w);
  fmt::print("cost model (assumptions, not measurements; ddp_sim --trace's): a link of {} Gbit/s with {} us per ring "
             "step, {} GFLOP/s of compute\n\n",
             m.link_gbps, m.link_latency_us, m.compute_gflops);
  const std::string one_label = fmt::format("one device, batch {}", b), ddp_label = fmt::format("DDP {} x {}", w, b);
  const size_t width = std::max<size_t>(one_label.size(), ddp_label.size());
  const double exposed = s.comm_us - s.hidden_us;
  fmt::print("{:<{}} | compute (forward, backward, step) | all-reduces | bytes each rank sends | not hidden | step\n",
             "run", width);
  fmt::print("{:<{}} | {:>30.1f} us | {:>11} | {:>21} | {:>10} | {:.1f} us\n", one_label, width, s1.step_us, 0, 0, "-",
             s1.step_us);
  fmt::print("{:<{}} | {:>30.1f} us | {:>11} | {:>21.0f} | {:>7.1f} us | {:.1f} us\n\n", ddp_label, width,
             s.step_us - exposed, s.buckets, sent, exposed, s.step_us);
  fmt::print("{}\n", timeline_summary(ddp, w).substr(timeline_summary(ddp, w).find("timeline iteration 1")));
  const double speedup = static_cast<double>(w) * s1.step_us / s.step_us;
  fmt::print("answer: one DDP step at batch {} per rank takes {:.1f} us against one device's {:.1f} us at the same "
             "batch: the same compute plus the all-reduces of {} gradient floats, {:.0f} bytes sent by each rank (the "
             "ring's 2 x ({}-1)/{} x 4 bytes per float), of which {:.0f}% hides behind the backward\n",
             b, s.step_us, s1.step_us, floats, sent, w, w, s.comm_us > 0 ? 100.0 * s.hidden_us / s.comm_us : 0.0);
  fmt::print("answer: an epoch takes {} times fewer steps under DDP, so its {} ranks go through the data {:.2f} times as "
             "fast as one device ({} would be perfect){}\n",
             w, w, speedup, w,
             speedup < 1.0 ? ": slower than one device, because the all-reduce not hidden costs more than the compute "
                             "DDP splits; more compute per byte (a larger --batch-size per rank, a model with more "
                             "FLOPs per parameter) or a faster link turns it around"
                           : "");
}

}  // namespace ddplab::questions
