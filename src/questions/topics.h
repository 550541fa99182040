// Each topic's defaults and run (one file per group of questions), for the table in topics.cc.
#pragma once

#include "src/questions/questions.h"
#include "src/report/timeline.h"

namespace ddplab::questions {

void batch_size_defaults(ddp::Config& cfg);  // batch.cc
void batch_size_run(const ddp::Config& cfg);
void lr_scaling_defaults(ddp::Config& cfg);
void lr_scaling_run(const ddp::Config& cfg);
void loss_scale_defaults(ddp::Config& cfg);  // loss_scale.cc
void loss_scale_run(const ddp::Config& cfg);
void accumulation_defaults(ddp::Config& cfg);  // accumulation.cc
void accumulation_check(const ddp::Config& cfg);
void accumulation_run(const ddp::Config& cfg);
void evaluation_defaults(ddp::Config& cfg);  // evaluation.cc
void evaluation_check(const ddp::Config& cfg);
void evaluation_run(const ddp::Config& cfg);
void fsdp_defaults(ddp::Config& cfg);  // fsdp.cc
void fsdp_check(const ddp::Config& cfg);
void fsdp_run(const ddp::Config& cfg);
void speed_defaults(ddp::Config& cfg);  // speed.cc
void speed_run(const ddp::Config& cfg);
// speed's cost model: ddp_questions sets it from --link-gbps, --link-latency-us and --compute-gflops.
CostModel& speed_cost_model();

}  // namespace ddplab::questions
