#include "src/ddp/zero.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "src/base/errors.h"

namespace ddplab::ddp {

std::vector<std::vector<size_t>> zero_partition(const std::vector<int64_t>& numels, int64_t world_size) {
  std::vector<size_t> all(numels.size());
  std::iota(all.begin(), all.end(), size_t{0});
  return zero_partition(numels, {all}, world_size);
}

std::vector<std::vector<size_t>> zero_partition(const std::vector<int64_t>& numels,
                                                const std::vector<std::vector<size_t>>& groups, int64_t world_size,
                                                std::vector<std::vector<std::vector<size_t>>>* per_group) {
  std::vector<std::vector<size_t>> partition(static_cast<size_t>(world_size));
  std::vector<int64_t> sizes(static_cast<size_t>(world_size), 0);  // carried from group to group
  if (per_group) per_group->assign(static_cast<size_t>(world_size), {});
  for (const std::vector<size_t>& group : groups) {
    std::vector<size_t> order = group;
    // Python's sorted(key=numel, reverse=True) is stable: equal sizes keep their model order.
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numels[a] > numels[b]; });
    std::vector<std::vector<size_t>> mine(static_cast<size_t>(world_size));
    for (size_t i : order) {
      // _get_min_index: the first rank whose total is strictly below every earlier one's (ties: lowest rank).
      const size_t r = static_cast<size_t>(std::min_element(sizes.begin(), sizes.end()) - sizes.begin());
      mine[r].push_back(i);
      sizes[r] += numels[i];
    }
    for (size_t r = 0; r < mine.size(); ++r) {
      partition[r].insert(partition[r].end(), mine[r].begin(), mine[r].end());
      if (per_group) (*per_group)[r].push_back(mine[r]);
    }
  }
  return partition;
}

void zero_sync_params(const std::vector<std::vector<size_t>>& partition,
                      const std::function<void(size_t, int64_t)>& broadcast) {
  for (size_t owner = 0; owner < partition.size(); ++owner) {
    for (size_t p : partition[owner]) broadcast(p, static_cast<int64_t>(owner));
  }
}

namespace {

std::vector<int64_t> numels_of(const std::vector<Parameter*>& params) {
  std::vector<int64_t> n;
  for (const Parameter* p : params) n.push_back(p->numel());
  return n;
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Parameter*> params, int64_t world_size, int64_t rank,
                                                 const LocalFactory& make_local)
    : Optimizer(std::move(params)), partition_(zero_partition(numels_of(params_), world_size)) {
  std::vector<Parameter*> shard;
  for (size_t i : partition_[static_cast<size_t>(rank)]) shard.push_back(params_[i]);
  local_ = make_local(std::move(shard));
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Parameter*> params,
                                                 const std::vector<std::vector<size_t>>& groups, int64_t world_size,
                                                 int64_t rank, const GroupFactory& make_local)
    : Optimizer(std::move(params)) {
  std::vector<std::vector<std::vector<size_t>>> per_group;
  partition_ = zero_partition(numels_of(params_), groups, world_size, &per_group);
  std::vector<std::vector<Parameter*>> shard;
  for (const auto& g : per_group[static_cast<size_t>(rank)]) {
    shard.emplace_back();
    for (size_t i : g) shard.back().push_back(params_[i]);
  }
  local_ = make_local(std::move(shard));
}

std::string zero_block(const std::vector<Parameter*>& params, const std::vector<std::vector<size_t>>& partition,
                       const std::vector<int64_t>& state_numel) {
  const int64_t plain = std::accumulate(state_numel.begin(), state_numel.end(), int64_t{0});
  std::string out = fmt::format(
      "ZeroRedundancyOptimizer (torch 1.13: parameters sorted by numel, largest first, each to the rank with the "
      "fewest so far,\ngroup by group with the totals carried; each rank steps its shard, then broadcasts it): optimizer state per rank, floats (bytes), "
      "vs plain DDP's {} ({} B) on every rank\n",
      plain, 4 * plain);
  for (size_t r = 0; r < partition.size(); ++r) {
    int64_t numel = 0;
    std::vector<std::string> names;
    for (size_t i : partition[r]) {
      numel += params[i]->numel();
      names.push_back(params[i]->name);
    }
    const int64_t s = state_numel[r];
    out += fmt::format("  rank {}: state {} ({} B, {:.1f}% of plain) | {} parameters: {}\n", r, s, 4 * s,
                       plain > 0 ? 100.0 * static_cast<double>(s) / static_cast<double>(plain) : 0.0, numel,
                       fmt::join(names, " "));
  }
  return out;
}

}  // namespace ddplab::ddp
