// ZeRO-1: every rank's step of a parameter is its owner's (zero1.h).
#include "src/check/replay/zero1.h"

#include <algorithm>

#include <fmt/format.h>

namespace ddplab::check {

Zero1::Zero1(const Run& run) : run_(run), present_(run.first().sharded) {
  if (!present_) return;
  owner_.assign(run.first().params.size(), -1);
  for (int r = run.world_size() - 1; r >= 0; --r)
    for (size_t i : run.ranks[static_cast<size_t>(r)].owned) owner_[i] = r;
}

std::string Zero1::describe() const {
  if (!present_) return "";
  std::string shares;
  for (const Manifest& m : run_.ranks)
    shares += fmt::format("{}rank {}: {}", shares.empty() ? "" : ", ", m.rank, m.owned.size());
  return fmt::format("ZeRO-1: {}'s {} steps each rank's share of the {} parameters ({}), then each is broadcast from "
                     "its owner; every rank's step is compared with its owner's",
                     run_.first().sharded_by, run_.first().optimizer_class, owner_.size(), shares);
}

void Zero1::run_findings(Findings& found) const {
  if (!present_) return;
  std::vector<std::string> none;
  for (size_t i = 0; i < owner_.size(); ++i)
    if (owner_[i] < 0) none.push_back(run_.first().params[i].name);
  if (none.empty()) return;
  found.add("zero1", "problem", "unowned", -1, -1, none[0],
            fmt::format("'{}'{} is in no rank's share of the sharded optimizer ({}): no rank steps it, so it never "
                        "trains. Every parameter must be owned by exactly one rank (e.g. parameter i by rank i % "
                        "world_size, with the real world_size)",
                        none[0], none.size() > 1 ? fmt::format(" (and {} more)", none.size() - 1) : "",
                        run_.first().sharded_by));
}

std::vector<std::vector<bool>> Zero1::adopt(const std::vector<std::vector<Matrix>*>& after) const {
  std::vector<std::vector<bool>> missing(after.size(), std::vector<bool>(owner_.size(), false));
  for (size_t i = 0; i < owner_.size(); ++i) {
    const int o = owner_[i];
    for (size_t r = 0; r < after.size(); ++r) {
      if (!after[r] || static_cast<int>(r) == o || o < 0) continue;  // unowned: every rank keeps it, as predicted
      if (after[static_cast<size_t>(o)] == nullptr) {
        missing[r][i] = true;
        continue;
      }
      (*after[r])[i] = (*after[static_cast<size_t>(o)])[i];
    }
  }
  return missing;
}

void Zero1::not_broadcast(int64_t step, int rank, const std::vector<std::string>& kept, Findings& found) {
  if (named_ || kept.empty()) return;
  named_ = true;
  const size_t i = static_cast<size_t>(std::find_if(run_.first().params.begin(), run_.first().params.end(),
                                                    [&](const TensorInfo& p) { return p.name == kept[0]; }) -
                                       run_.first().params.begin());
  found.add("zero1", "problem", "not-broadcast", step, rank, kept[0],
            fmt::format("step {}: rank {}'s '{}'{} kept its value from before the step, while rank {}, which owns it, "
                        "stepped it: the sharded step was never broadcast, so each rank trains only its own share and "
                        "the replicas drift apart. After the shard's step: for each parameter p, dist.broadcast(p.data, "
                        "src=its owner)",
                        step, rank, kept[0], kept.size() > 1 ? fmt::format(" (and {} more)", kept.size() - 1) : "",
                        i < owner_.size() ? owner_[i] : -1));
}

}  // namespace ddplab::check
