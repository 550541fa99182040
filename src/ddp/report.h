// What ddp_sim prints at the end, and its JSON dump.
#pragma once

#include <string>
#include <vector>

#include "src/compare.h"
#include "src/ddp/config.h"
#include "src/ddp/trainer.h"

namespace ddplab {

// cmp of every parameter (state_dict names) of two models.
std::vector<CmpResult> cmp_models(const MLP& a, const MLP& b);

// The cmp tables (replica k vs replica 0; DDP vs one device when simulated) and a sentence on why.
std::string report_tables(const ddp::Config& cfg, const ddp::SimResult& res);

// {"world_size", "args", "replicas": [{state_dict}], "sampler_indices": [epoch][rank][...], "losses": [rank][...]}
std::string dump_json(const ddp::Config& cfg, const ddp::SimResult& res);

// --explain on the last layer's weight gradient as it sits in the first bucket of the first all-reduce.
std::string explain_first_bucket(const ddp::Config& cfg, const std::vector<float*>& bufs, size_t n);

}  // namespace ddplab
