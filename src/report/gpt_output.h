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

// ddp_verify --model gpt's comparison: each real rank against its simulated rank (the cmp tables of rank 0 and
// the last rank, losses and clip norms bit for bit), the last real rank against rank 0, that the ranks stopped
// where the simulator did when DDP raised (`error`, `sim_error`: unfinished_reduction_message, "" if none),
// and the verdict line. *ok: all of it held.
std::string gpt_sim_vs_real(const gpt::RunConfig& cfg, const std::vector<RankRecord>& real,
                            const std::vector<RankRecord>& sim, const std::string& error, const std::string& sim_error,
                            bool* ok);

}  // namespace ddplab::report
