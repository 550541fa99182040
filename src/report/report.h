// What ddp_sim prints at the end, and its JSON dump.
#pragma once

#include <string>
#include <vector>

#include "src/base/compare.h"
#include "src/ddp/config.h"
#include "src/ddp/trainer.h"

namespace ddplab {

// cmp of every parameter (state_dict names) of two models.
std::vector<CmpResult> cmp_models(const Module& a, const Module& b);

// The cmp tables (replica k vs replica 0; DDP vs one device when simulated) and a sentence on why.
std::string report_tables(const ddp::Config& cfg, const ddp::SimResult& res);

// Why the ranks' buffers agree or not, as the cmp tables say it (DDP's broadcast_buffers), lines of at most
// ~100 characters continuing a sentence that begins "N of M ranks differ from rank 0, in their buffers only: ".
std::string buffers_why(const ddp::Config& cfg, bool buffers_equal);

// The one dump ddp_sim and ddp_verify both write, from pieces already in JSON:
// {"world_size", "backend" (real runs only), "args", "replicas": [{state_dict}],
//  "sampler_indices": [epoch][rank][...], "losses": [rank][...]}, then, when there are any,
//  "buffers": [{name: value}] per rank and "test_correct": [count] per rank.
struct DumpPieces {
  int64_t world_size = 0;
  std::string backend;                     // "" for the simulator
  std::vector<std::string> args;           // to_args(cfg)
  std::vector<std::string> replicas;       // json_params of each rank
  std::vector<std::string> epoch_indices;  // per epoch: [[rank 0's indices], [rank 1's], ...]
  std::vector<std::string> losses;         // per rank: [loss, ...]
  std::vector<std::string> buffers;        // json_buffers of each rank (models with buffers only)
  std::vector<int64_t> test_correct;       // --dataset digits: each rank's correct test predictions
};
std::string dump_json(const DumpPieces& d);
// The simulator's run as DumpPieces, written.
std::string dump_json(const ddp::Config& cfg, const ddp::SimResult& res);

// --explain on the last layer's weight gradient as it sits in the first bucket of the first all-reduce.
std::string explain_first_bucket(const ddp::Config& cfg, const std::vector<float*>& bufs, size_t n);

}  // namespace ddplab
