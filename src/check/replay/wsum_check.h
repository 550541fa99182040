// A whole-run step's all-reduce checked against rounding (docs/trace_format.md, "The weighted sums"): each rank
// keeps, per parameter, float64 weighted sums of its local gradients (S and A = the sum of |x|, weighted) and of
// .grad after DDP (S); for each parameter, the sum DDP left must equal the ranks' sums, scaled, within the bound
// the float32 additions' rounding allows, whatever their order. Every element of every all-reduce is covered.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "src/check/findings/findings.h"
#include "src/check/replay/rounding_bound.h"
#include "src/check/replay/replay.h"

namespace ddplab::check {


struct WsumCounts {
  int64_t steps = 0;       // whole-run steps whose all-reduces were checked against rounding
  int64_t tensors = 0;     // rank-parameter pairs checked
  int64_t within = 0;      // of them, within the bound
  double worst = 0.0;      // the largest |difference| / bound among those within it (how much room was left)
  std::string why;         // why some step was not checked (the first reason), or ""
};

// Names each rank whose .grad after DDP, at some parameter, is farther from the ranks' local gradients than
// rounding allows: grad-not-as-predicted (cause "weighted-sum").
void check_wsum(const Manifest& m, const GradReplay& replay, const std::vector<const StepRecord*>& recs,
                Findings& found, WsumCounts* counts);

// .grad changed between backward and optimizer.step() in a whole-run step, seen through the weighted sums of
// .grad after DDP and at the step ("grad", "grad_step"): whether it is one factor c on every parameter (a clip,
// a rescale), each S(at the step) = c S(after DDP) within the float32 product's rounding,
// |S_step - c S_grad| <= 2^-24 * A_step + the float64 sums' own rounding, allowed four times over. c is the median
// of the parameters' ratios S_step / S_grad (those not mostly cancellation; else a least-squares fit), so one
// edited parameter does not move it; the bound of parameter i adds the rounding of the parameter q that c came
// from, carried over: 2^-24 A_q |S_grad_i / S_grad_q|. `worst` names the parameter farthest outside its bound
// (SIZE_MAX: every one within).
struct OneFactor {
  bool known = false;  // the step kept both sums
  double factor = 0.0;
  size_t worst = SIZE_MAX;
  double ratio = 0.0;  // worst's |S_step - c S_grad| / bound
};
OneFactor fit_one_factor(const Manifest& m, const StepRecord& rec);

// The report's norms of a whole-run step, from its sums of squares: {the rank's own gradient, .grad after DDP}.
// The first only where the step's one backward's local gradient is the whole of it (no prior kept); NaN otherwise.
std::pair<double, double> wsum_norms(const StepRecord& rec);

}  // namespace ddplab::check
