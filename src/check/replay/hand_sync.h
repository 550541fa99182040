// A sync written by hand (manifest "sync": "hand": no DistributedDataParallel, the script all-reduces the
// gradients itself). Per step:
//  1. the script's own collectives replayed from every rank's recorded input in the backend's order (Gloo's
//     ring, chunked by each call's own size), each rank's recorded output compared bit for bit;
//  2. the gradient each rank's optimizer stepped with explained from its local gradients: what was handed to
//     the collective (as is, divided first, multiplied, doubled), and what was done to its result (divided,
//     multiplied by 1/world_size, divided twice, by 2); per parameter, in one flat buffer or in buckets;
//  3. the same local gradients through DDP's Reducer with DDP's defaults ("vs_ddp"): how many values are the
//     bits torch's DDP would have stepped with;
//  4. the classic mistakes named at the step they first act, with the fix.
#pragma once

#include <string>
#include <vector>

#include "src/check/check.h"
#include "src/check/findings/findings.h"
#include "src/check/replay/replay.h"

namespace ddplab::check {

class HandSync {
 public:
  // ddp: the run's GradReplay, which predicts DDP's .grad from the same local gradients.
  HandSync(const Run& run, GradReplay* ddp) : run_(run), ddp_(ddp) { res_.present = run.first().hand; }
  // One step of every rank (recs[r] null: rank r has no record of it). Fills line's grads (the script's own
  // averaging replayed) and vs_ddp; findings into `found`.
  void step(const std::vector<StepRecord*>& recs, bool first_step, Findings& found, StepLine* line);
  // A DDP run whose script all-reduces .grad again after DDP's backward averaged it (the step's collectives as
  // recorded beside DDP): named once, at the step.
  static void on_top_of_ddp(const std::vector<const StepRecord*>& recs, Findings& found);
  // A collective that raised in the script (the manifests' "collective_error"): named, with torch's error and the fix.
  static void collective_errors(const Run& run, Findings& found);
  // The run's totals, and how the script averages, in words.
  const CheckResult::Hand& result() const { return res_; }

 private:
  void replay_collectives(const std::vector<StepRecord*>& recs, Findings& found, int64_t step);
  void explain(const std::vector<StepRecord*>& recs, Findings& found, StepLine* line);
  void vs_ddp(const std::vector<StepRecord*>& recs, StepLine* line);

  const Run& run_;
  GradReplay* ddp_;
  CheckResult::Hand res_;
  std::vector<int64_t> synced_at_;  // per parameter, the last step a collective carried it (-1: none yet)
  // Per collective of the step: the replayed output of each rank (empty: not replayed).
  std::vector<std::vector<std::vector<float>>> replayed_;
};

}  // namespace ddplab::check
