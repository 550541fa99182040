// --trace: a Chrome trace (chrome://tracing, Perfetto) of DDP steps under an alpha-beta cost model, for any
// model (the MLP, the CNN, a --model spec, the GPT): FLOPs per layer with parameters. Per rank: forward,
// backward layer by layer, "bucket ready" marks, one all-reduce per bucket on a
// communication stream, optimizer step. Iteration 0 uses DDP's single bucket, iteration 1 the rebuilt
// ones, so a learner sees why rebuilding (and bucket_cap_mb) lets communication hide behind backward.
#pragma once

#include <string>
#include <vector>

#include "src/base/flags.h"
#include "src/ddp/config.h"

namespace ddplab {

struct CostModel {
  double link_latency_us = 5.0;  // alpha, per ring step
  double link_gbps = 10.0;       // bandwidth, Gbit/s
  double compute_gflops = 50.0;  // sustained float32 rate for forward/backward/optimizer FLOPs
};

struct TraceEvent {
  std::string name, cat;
  char ph;         // 'X' complete event, 'i' instant
  double ts, dur;  // microseconds
  int pid, tid;    // pid = rank; tid 0 = compute, tid 1 = communication
};

// One bucket's all-reduce, in microseconds from the start of the backward.
struct BucketTime {
  size_t floats = 0;
  double ready_us = 0, start_us = 0, dur_us = 0;  // its last gradient ready; the all-reduce's start, length
};

struct StepCost {
  double step_us = 0, backward_us = 0, comm_us = 0, hidden_us = 0;
  size_t buckets = 0;
  std::vector<BucketTime> bucket_times;
};

struct Timeline {
  std::vector<TraceEvent> events;
  std::vector<StepCost> steps;  // iteration 0 and 1
};

// Ring all-reduce time: 2(N-1) * alpha + 2(N-1)/N * bytes / bandwidth.
double ring_allreduce_us(size_t bytes, int64_t world_size, const CostModel& m);
// The bytes each rank sends in a ring all-reduce of `bytes`: 2(N-1)/N of them (N-1 steps of reduce-scatter and
// N-1 of all-gather, each a 1/N chunk); sim/questions/ddp_options.py measures torch's over Gloo.
double ring_bytes_per_rank(size_t bytes, int64_t world_size);

Timeline build_timeline(const ddp::Config& cfg, const CostModel& m);
std::string trace_json(const Timeline& t);
std::string timeline_summary(const Timeline& t, int64_t world_size);

// ddp_sim's --link-latency-us, --link-gbps and --compute-gflops (the defaults above where not given).
CostModel cost_model_from_flags(const Flags& flags);
// --trace FILE: writes the Chrome trace (temporary file, then rename) and prints the text timeline; "" or
// why the file could not be written.
std::string write_trace(const std::string& path, const ddp::Config& cfg, const CostModel& m);

}  // namespace ddplab
