// What a --model gpt run prints and dumps (report.h's tables and dump, for the GPT's ranks): each rank's losses,
// evaluations and clip norms, the buckets, and the cmp table of every rank's parameters against rank 0's.
#pragma once

#include <string>
#include <vector>

#include "src/gpt/train.h"

namespace ddplab::report {

// Parameter names without the "transformer." prefix, for lines a learner reads.
std::string short_names(std::string text);

// What one rank ended with, wherever it ran (a simulated rank, or a real one gathered to rank 0).
struct RankRecord {
  std::vector<std::string> names;          // parameters(), state_dict names
  std::vector<std::vector<float>> params;  // their final values
  gpt::RankLog log;
};
RankRecord record_of(const gpt::GptRank& rank);

// "step 0 | rank0 loss 4.491234 | rank1 loss 4.500112 | clip_grad_norm_ total 1.2345" lines, eval lines,
// then the cmp table of every rank against rank 0.
std::string gpt_summary(const gpt::RunConfig& cfg, const std::vector<RankRecord>& ranks);

// {"world_size", "backend" (real runs), "args", "replicas": [{state_dict}], "losses": [rank][...],
//  "evals": [rank][[step, train, val], ...], "clip_norms": [rank][...]}, plus "error" when DDP stopped.
std::string gpt_dump_json(const gpt::RunConfig& cfg, const std::vector<RankRecord>& ranks, const std::string& backend,
                          const std::string& error);

}  // namespace ddplab::report
