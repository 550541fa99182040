// A whole-run step's sample, replayed bit for bit (docs/trace_format.md, "The sample"): the recorder keeps the
// same few elements of every tensor on every rank, a choice that moves from step to step; ddp_check predicts
// those elements of DDP's all-reduce and of the optimizer step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/check/findings/findings.h"
#include "src/check/replay/replay.h"

namespace ddplab::check {

// The recorder's slots for `step` (verify/ddplab_trace/sample.py): slot k is element
// ((step * slots + k) * kSampleMultiplier) mod total of the parameters laid end to end in manifest order,
// row-major. The multiplier is a prime larger than any model: consecutive slots visit every element once.
constexpr uint64_t kSampleMultiplier = 2654435761u;
std::vector<SampleSlot> sample_plan(const Manifest& m, int64_t step, size_t slots);

struct SampleCounts {
  int64_t steps = 0;                    // whole-run steps whose sample was replayed
  int64_t values = 0, exact = 0, allclose = 0;  // sampled values compared: .grad after DDP, parameters and state after
  std::string why;                      // why some step's all-reduce was not replayed (the first reason), or ""
};

// Replays the sample of a whole-run step (every rank's record of it) and names each rank whose sampled values
// differ from the prediction: grad-not-as-predicted, step-not-as-predicted (cause "sample").
void check_sample(const Run& run, const GradReplay& replay, const std::vector<const StepRecord*>& recs,
                  bool step_exact, Findings& found, SampleCounts* counts);

}  // namespace ddplab::check
