// The simulator's FSDP2: what `fully_shard` on every layer with parameters (and on the root) does to DDP's
// gradient sync, for ddp_questions fsdp (issue 42's first pieces). Each layer is one group; its gradients are
// reduce-scattered as torch 2.x does over Gloo (collective/fsdp.h: summed over the group's padded flat buffer in
// Gloo's ring order, then divided by world_size), and every rank's .grad is set to the whole averaged gradient:
// the shards of all ranks side by side. The optimizers (SGD, Adam, AdamW) step element by element, so stepping
// the whole gradient is stepping every shard; what a rank actually holds is its shard (fsdp_shard_rows).
#pragma once

#include <string>
#include <vector>

#include "src/ddp/loop.h"
#include "src/ddp/reducer.h"

namespace ddplab::ddp {

// LoopSync::allreduce for FSDP2 over `reducers` (every local rank's; their params() in model order).
std::vector<HookReport> fsdp_allreduce(const std::vector<Reducer*>& reducers, size_t num_buckets);

// The groups fully_shard makes of a model's parameters: the parameter indices of each module (the name before
// the last '.'), in parameter order.
std::vector<std::vector<size_t>> fsdp_groups(const std::vector<Parameter*>& params);

}  // namespace ddplab::ddp
