// ZeRO-1 (the manifests' optimizer "sharded": an optimizer sharded by hand, or torch's ZeroRedundancyOptimizer):
// each rank's optimizer steps only the parameters it owns, then step() broadcasts each parameter from its owner.
// So what every rank holds after the step is its owner's step of it: the owner's prediction is every rank's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/check/trace/trace.h"
#include "src/check/findings/findings.h"
#include "src/tensor/tensor.h"

namespace ddplab::check {

class Zero1 {
 public:
  explicit Zero1(const Run& run);
  bool present() const { return present_; }
  // The sharding in words: whose optimizer, how many parameters each rank steps.
  std::string describe() const;
  // Once per run: a parameter no rank's optimizer steps (it never trains).
  void run_findings(Findings& found) const;
  // after[r] (null: no prediction for rank r this step): each parameter rank r does not step becomes its owner's
  // prediction. Returns, per rank, the parameters left without one (the owner has none this step).
  std::vector<std::vector<bool>> adopt(const std::vector<std::vector<Matrix>*>& after) const;
  // Rank r's parameters in `kept` ended the step at their value before it while their owners stepped them: the
  // broadcast that should have brought them is missing. Named once, at the first step it acts.
  void not_broadcast(int64_t step, int rank, const std::vector<std::string>& kept, Findings& found);

 private:
  const Run& run_;
  bool present_ = false;
  std::vector<int> owner_;  // per parameter: the lowest rank whose optimizer steps it, -1 none
  bool named_ = false;
};

}  // namespace ddplab::check
