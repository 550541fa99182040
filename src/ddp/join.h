// Uneven inputs under DDP (--uneven K, --join): which rank has which batch, and what
// torch.distributed.algorithms.Join (torch 1.13: join.py, nn/parallel/distributed.py's _DDPJoinHook) does
// about the ranks that ran out. Every rank can compute all of it: the batch counts follow from the config.
#pragma once

#include <cstdint>
#include <string>

#include "src/ddp/config.h"
#include "src/ddp/reducer.h"

namespace ddplab::ddp {

// --uneven K: rank r trains on the first B - K*r of the B batches its DataLoader gives per epoch, as a
// training loop that breaks early would.
int64_t rank_batches(const Config& cfg, int64_t rank);
// How many ranks still have batch b (0-based) of an epoch.
int64_t active_ranks(const Config& cfg, int64_t b);
// With Join, DDP's buffer broadcast before batch b comes from the highest rank still active
// (_find_common_rank(rank, True): an all_reduce MAX of the active ranks' ranks), not rank 0; without it, rank 0.
int64_t buffer_source(const Config& cfg, int64_t b);
// Join's post_hook (_sync_final_model): the highest rank among the last joiners (the ranks with the most
// batches) broadcasts its parameters and buffers to every rank.
int64_t authoritative_rank(const Config& cfg);

// Refuses what cannot be run or has no PyTorch counterpart here: one line naming the flag and its limit.
void validate_uneven(const Config& cfg);

// Without Join: the one line that says where PyTorch's ranks would block (epoch and batch, the bucket whose
// all-reduce the short rank never reaches, which rank ran out, what Gloo reports and when).
std::string no_join_line(const Config& cfg, int64_t epoch, int64_t b, const Reducer& layout);

// One line for the output: batches per rank, how many all-reduces the joined ranks shadowed, the divisor,
// who broadcasts the final model. Empty without --uneven or --join.
std::string join_summary(const Config& cfg);

}  // namespace ddplab::ddp
