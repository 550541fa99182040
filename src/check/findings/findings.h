// What ddp_check says went wrong, from the recorded run's own data: the replica invariant stage by stage
// (DDP's gradients, the gradients the optimizer saw, the step, the parameters between steps), gradients
// and steps against the prediction, gradients changed before the step, buffers, unused parameters, and
// the data the ranks were fed (per-sample fingerprints). One finding per kind, cause and rank, at its
// first step, with how many later steps repeat it.
#pragma once

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "src/check/check.h"

namespace ddplab::check {

// The first parameter whose `kind_a` tensor in `a` differs from its `kind_b` tensor in `b` (absent on one
// side counts as different; NaN equals NaN), or "".
std::string first_difference(const Manifest& m, const StepRecord& a, const char* kind_a, const StepRecord& b,
                             const char* kind_b);

// What to write instead, for a data-sharding mistake, in the script's own terms (plain torch or Lightning).
std::string sampler_advice(const Run& run);

class Findings {
 public:
  explicit Findings(const Run& run)
      : run_(run), seq_(static_cast<size_t>(run.world_size())), batches_(static_cast<size_t>(run.world_size())) {}

  void add(const std::string& kind, const std::string& severity, const std::string& cause, int64_t step, int rank,
           const std::string& name, const std::string& message);
  // Rank r's recorded .grad against the predicted one, per parameter.
  void grads_vs_prediction(int64_t step, int r, const std::vector<CmpResult>& rows, bool order_known, Divergence* div);
  // Rank r's recorded parameters after optimizer.step() against torch.optim's arithmetic.
  void step_vs_prediction(int64_t step, int r, const std::vector<CmpResult>& rows, bool exact_expected, Divergence* div);
  // A tensor the trace keeps as a digest (`what`: "grad" after backward, or "param" after the step) whose
  // digest is not the prediction's: which one differs is known, by how much is not.
  void digest_differs(const char* what, int64_t step, int r, const std::string& name, bool exact_expected,
                      bool fold64, Divergence* div);
  // The replica invariant over the ranks that ran this iteration (recs[r] null: rank r has joined).
  // moved[r] names rank r's first parameter that changed between its previous step and this one where
  // nothing DDP does explains it ("" : none). True when every rank's parameters after the step agree.
  bool replicas(const std::vector<const StepRecord*>& recs, const std::vector<std::string>& moved, bool first_step,
                Divergence* div);
  // A whole-run step (digests only): each stage's digests compared across ranks (whole_run.cc); a rank whose
  // digests the others do not share is named once, at its first step and stage. True when the parameters after
  // the step agree.
  bool whole_run_step(const std::vector<const StepRecord*>& recs, Divergence* div);
  // A whole-run step where every rank's parameters or optimizer state changed alike since its previous step's
  // optimizer.step() left them (prev[r]: rank r's previous record): a note, since the replicas stay equal.
  void whole_run_alike(const std::vector<const StepRecord*>& recs, const std::vector<const StepRecord*>& prev);
  // FSDP2: rank r's shard `name` changed between its previous step and this one, outside optimizer.step().
  void changed_outside_step(int64_t step, int r, const std::string& name);
  // FSDP2: the step ran before its last backward's gradients were reduce-scattered.
  void unreduced_before_step(int64_t step);
  // Gradients changed before the step, buffers, unused parameters; collects the input fingerprints.
  void per_step(const std::vector<const StepRecord*>& recs);
  // The data findings from every step's fingerprints, where no sampler's indices were recorded; returns the
  // data line's verdict. `loaders`: whether the script iterated any DataLoader (else its batches came from
  // elsewhere, e.g. nanoGPT's torch.randint, and the advice is about seeding, not samplers).
  std::string after_run(bool loaders);
  std::vector<Finding> take();
  // A rank joined early under Join: it skipped optimizer steps, so from then on the ranks' optimizer state may
  // differ (Join re-syncs the parameters at its end, not the optimizer's state).
  void join_skew() { join_skew_ = true; }

 private:
  const Run& run_;
  std::vector<Finding> list_;
  std::map<std::tuple<std::string, std::string, int>, size_t> first_;  // (kind, cause, rank) -> index
  std::map<size_t, int64_t> repeats_;
  std::map<size_t, std::vector<int64_t>> repeat_steps_;
  std::vector<std::vector<std::pair<int64_t, std::string>>> seq_;  // [rank]: (step, fingerprint) fed
  std::vector<std::map<int64_t, std::vector<std::string>>> batches_;  // [rank]: step -> its samples' fingerprints
  // Pairs of ranks fed the same batches at the same steps, beyond what independent draws give; the verdict.
  // coincided: how many samples two ranks drew at the same step, and how many chance gives (when none is found).
  std::string same_batches(const std::string& advice, std::string* coincided);
  int64_t first_coincidence(int a, int b, int64_t lag) const;
  std::vector<int64_t> identical_steps_;  // steps whose inputs were the same on every rank
  int64_t steps_with_inputs_ = 0;
  bool diverged_ = false;
  std::set<int> whole_run_named_;  // ranks a whole-run step named as diverged, or a full step found apart
  bool join_skew_ = false;
};

class GradReplay;

// The findings that need no step: what the recorder could not record, the optimizer's parameters, ranks whose
// recording stopped or that did not reach close(), and the comm hook's limits (run_findings.cc).
void run_findings(const Run& run, const GradReplay& replay, Findings& found);
// DDP's parameters the traced optimizer does not hold: a mistake when nothing else changes them either; a
// second optimizer that steps them is a design. `changed`: whether each of missing_params changed over the run.
void optimizer_findings(const Manifest& m, const std::vector<bool>& changed, Findings& found);

// What check_run saw over the whole run, for the findings about the run as a whole.
struct RunSeen {
  bool steps = false;        // a step was compared
  bool any_local = false;    // local gradients were recorded
  bool any_nonzero = false;  // one of them was not all zeros
  bool any_moved = false;    // a step, or something else, changed a parameter
  bool any_sync = false;     // some recorded backward was synchronised (all-reduced, reduce-scattered)
  int64_t averagings = 0, averagings_exact = 0;  // post-local SGD's model averagings, and those bit for bit
};
// Post-local SGD's averagings, and a run that trains nothing (zero gradients, parameters never changed).
void what_the_run_did(const Manifest& m, const RunSeen& seen, Findings& found);

}  // namespace ddplab::check
