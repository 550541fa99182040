// ddp_sim --hand-sync: what the script's own averaging computed, and the same run under DDP(model) beside it.
#pragma once

#include <string>

#include "src/ddp/config.h"
#include "src/ddp/trainer.h"

namespace ddplab {

// The hand-written sync in words: its layout and arithmetic ("one flat buffer of every gradient in model order
// (38 floats), SUM then / world_size").
std::string describe_hand_sync(const ddp::Config& cfg, const ddp::SimResult& res);

// The DDP(model) run ddp_sim puts beside a hand-written sync: the same run with DDP's own averaging and defaults
// (grad * float(1/world_size) then SUM, 25 MiB buckets rebuilt after iteration 0).
ddp::Config ddp_twin(const ddp::Config& cfg);

// Rank 0's averaged gradient at the first synchronised step (the same weights and batches in both runs), as one
// vector in the reducer's parameter order: what SimHooks::after_allreduce keeps.
ddp::SimHooks keep_first_average(std::vector<float>* grad);

// The hand-written sync's run against DDP(model)'s: how many values of step 0's averaged gradient (`hand_grad`,
// `ddp_grad`) are DDP's bits, rank 0's parameters after training as a cmp table, and where the bits differ.
std::string hand_vs_ddp(const ddp::Config& cfg, const ddp::SimResult& hand, const ddp::SimResult& ddp,
                        const std::vector<float>& hand_grad, const std::vector<float>& ddp_grad);

}  // namespace ddplab
