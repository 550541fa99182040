// torch.distributed.optim.ZeroRedundancyOptimizer (torch 1.13, its defaults: parameters_as_bucket_view=False,
// overlap_with_ddp=False): the parameters are partitioned among the ranks, each rank keeps optimizer state
// for its own shard only and steps it, then every parameter is broadcast from its owner. The arithmetic is the
// plain optimizer's (each parameter is stepped by exactly one rank with the same formulas), so the bits are
// plain DDP's; what changes is where the state lives.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/train/optim.h"
#include "src/tensor/tensor.h"

namespace ddplab::ddp {

// ZeroRedundancyOptimizer._partition_parameters for one param group: the parameters (indices into `numels`)
// sorted by numel, largest first, with a stable sort (ties keep model order); each goes to the first rank with
// the smallest running numel total. Result: per rank, its parameters in that sorted order (the broadcast order).
std::vector<std::vector<size_t>> zero_partition(const std::vector<int64_t>& numels, int64_t world_size);
// The same over the optimizer's param groups (indices into `numels`, group by group): each group sorted and
// assigned in turn, the ranks' running totals carried from one group to the next. Per rank: its parameters
// group by group; `per_group` (optional) gets them per rank and group.
std::vector<std::vector<size_t>> zero_partition(const std::vector<int64_t>& numels,
                                                const std::vector<std::vector<size_t>>& groups, int64_t world_size,
                                                std::vector<std::vector<std::vector<size_t>>>* per_group = nullptr);

// _sync_params: for rank 0, 1, ...: each parameter of that rank's partition, in partition order, broadcast
// from its owner. `broadcast(param, owner)` does one (the verifier over the Communicator, the simulator by
// copying the owner's bits).
void zero_sync_params(const std::vector<std::vector<size_t>>& partition,
                      const std::function<void(size_t param, int64_t owner)>& broadcast);

// One rank's ZeroRedundancyOptimizer: `make_local(shard)` builds optimizer_class over this rank's parameters
// (in partition order) with the same hyperparameters. step() steps the shard only; the broadcast that follows
// is zero_sync_params, run by the caller once every rank has stepped. zero_grad clears every parameter's grad.
class ZeroRedundancyOptimizer : public Optimizer {
 public:
  using LocalFactory = std::function<std::unique_ptr<Optimizer>(std::vector<Parameter*>)>;
  ZeroRedundancyOptimizer(std::vector<Parameter*> params, int64_t world_size, int64_t rank,
                          const LocalFactory& make_local);
  // Over param groups (`groups`: indices into params): make_local gets this rank's shard of each group, in
  // group order (a group may be empty), and builds the optimizer over them with each group's options.
  using GroupFactory = std::function<std::unique_ptr<Optimizer>(std::vector<std::vector<Parameter*>>)>;
  ZeroRedundancyOptimizer(std::vector<Parameter*> params, const std::vector<std::vector<size_t>>& groups,
                          int64_t world_size, int64_t rank, const GroupFactory& make_local);
  void step() override { local_->step(); }
  int64_t state_numel() const override { return local_->state_numel(); }
  const std::vector<std::vector<size_t>>& partition() const { return partition_; }
  const std::vector<Parameter*>& params() const { return params_; }

 private:
  std::vector<std::vector<size_t>> partition_;
  std::unique_ptr<Optimizer> local_;
};

// The block ddp_sim and ddp_verify print: each rank's partition (state_dict names, numel) and its optimizer
// state in floats and bytes against plain DDP's (every rank holding the whole state: the sum of the shards').
std::string zero_block(const std::vector<Parameter*>& params, const std::vector<std::vector<size_t>>& partition,
                       const std::vector<int64_t>& state_numel);

}  // namespace ddplab::ddp
