// check_run's state over one run and its passes over each DDP iteration (check.cc reads and runs them in order,
// step_passes.cc holds the passes). Private to the library.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/base/parallel.h"
#include "src/check/check.h"
#include "src/check/findings/findings.h"
#include "src/check/findings/health.h"
#include "src/check/replay/hand_sync.h"
#include "src/check/replay/replay.h"
#include "src/check/replay/sample_replay.h"
#include "src/check/replay/step_compare.h"
#include "src/check/replay/wsum_check.h"
#include "src/check/replay/zero1.h"

namespace ddplab::check {

class RunCheck {
 public:
  explicit RunCheck(const Run& run);
  CheckResult run();

 private:
  // Reading: the ranks' next records merged by DDP iteration (segment, index) into cur_ / recs_; false at the end.
  bool next_iteration();
  std::vector<std::pair<int, int64_t>> records_to_read();
  void previous_params_filled_in();  // param_before/ the recorder left out: the previous step's param_after/

  // The passes over one iteration, in order.
  void absent_ranks();                   // joined (Join), or their trace ended
  void health_pass();                    // NaN, parameters DDP does not reduce, .grad not cleared, module(x)
  void sync_pass(StepLine& line);        // DDP's synchronised backward predicted, or the hand-written sync replayed
  void ddp_grads(StepLine& line);        //   DDP's: each rank's .grad against the replay
  void optimizer_pass(StepLine& line);   // each rank's step against torch.optim's arithmetic
  bool kept_its_value(StepRecord& rec, size_t i, const Matrix& owners) const;  // ZeRO-1: no broadcast came
  void replica_pass(StepLine& line);     // the replicas, and what replaced parameters between steps
  void whole_run_pass();                 // a whole-run step: the sample, the weighted sums, changes alike
  void end_of_step(StepLine& line);      // totals; keep only what the next step needs
  void after_run();                      // findings over the whole run, the data, the summary fields

  std::vector<const StepRecord*> previous() const;

  const Run& run_;
  const Manifest& m_;
  const int ws_;
  CheckResult res_;
  GradReplay replay_;
  Findings found_;
  Health health_;
  HandSync hand_;  // m_.hand: the script's own sync, replayed in place of DDP's
  Zero1 zero1_;    // a sharded optimizer: every rank's step of a parameter is its owner's
  bool modelled_optimizer_ = false;
  std::vector<RankData> data_;
  std::set<int64_t> averaged_;  // steps after which a model averager ran (every rank's list: the same calls)
  ThreadPool pool_;

  // Across iterations.
  std::vector<size_t> next_;
  std::vector<std::unique_ptr<StepRecord>> head_, prev_;
  using Read = std::vector<std::pair<int, std::unique_ptr<StepRecord>>>;
  std::future<Read> ahead_;
  bool pairing_lost_ = false, first_ = true;
  RunSeen seen_;
  std::vector<uint32_t> missing_first_;  // digests of rank 0's first param_before of the params no group holds
  // Per rank, the optimizer state predicted after its last step: what a digest of the next step's state is
  // checked against, and then stands for.
  std::vector<safetensors::TensorMap> carried_;
  std::vector<int64_t> carried_step_;
  std::set<int> gone_;  // ranks whose trace ended, already reported
  SampleCounts sampled_;
  WsumCounts wsums_;

  // This iteration.
  std::vector<std::unique_ptr<StepRecord>> cur_;
  std::vector<const StepRecord*> recs_;
  const StepRecord* ref_ = nullptr;
  int64_t step_ = 0;
  bool missing_ = false, digests_only_ = false;
};

}  // namespace ddplab::check
