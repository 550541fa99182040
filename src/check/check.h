// ddp_check: replays DDP from a recorded run's own local gradients (src/check/trace.h) with ddplab's
// Reducer, collectives, comm hooks and optimizers, compares every rank's recorded .grad and parameters
// with the prediction, and names what went wrong (the finding kinds below) with its step, rank and
// parameter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/check/findings/data.h"
#include "src/check/trace/trace.h"
#include "src/base/compare.h"

namespace ddplab::check {

// kinds: nonfinite (uninitialised | parameter | input | overflow | all-reduce | changed-before-step |
// step-overflow | unrecorded-step), not-reduced-by-ddp (frozen | parameters_to_ignore), grads-not-cleared,
// not-all-reduced (module-call | second-backward | no-sync), replicas-diverged (cause: gradients | gradients-changed | optimizer | outside-step),
// grad-not-as-predicted, step-not-as-predicted (sample: a whole-run step's sampled element), not-all-reduced, uneven-steps, optimizer-misses-parameters,
// nothing-trains, same-data-on-all-ranks, same-order-every-epoch, overlapping-data,
// validation-overlaps-training, buffers-differ, grads-changed-before-step, unused-parameters,
// buckets-not-as-predicted, model-averaging, recording-stopped, not-checked, nonfinite, uninitialised-parameters;
// grads-changed-before-step's causes one-factor | rounding | edited | digests; under FSDP2 also
// changed-outside-step (outside-step; on every rank alike in a whole-run step, parameters | optimizer-state: a
// note), not-reduced (gradient-sync-off | before-step) and
// grads-changed-before-step (per-rank: a problem).
// severity: "problem" or "note". docs/checking_a_real_run.md has the table.
struct Finding {
  std::string kind, severity, cause, name, message;
  int64_t step = -1;
  int rank = -1;
  int64_t repeats = 0;  // later steps where the same finding (kind, cause, rank) was seen again
  std::vector<int64_t> repeat_steps;  // those steps, in order (the first 100000)
};

struct Counts {
  int64_t checked = 0, exact = 0, allclose = 0, different = 0;  // tensors (one per parameter, rank, step)
  void add(const CmpResult& r);
};

struct StepLine {
  int64_t step = 0;
  std::vector<bool> ran;  // per rank: it ran this iteration (false: it had joined, or its trace ended)
  Counts grads, params;                           // all ranks
  std::vector<Counts> rank_grads, rank_params;  // per rank (the --report page)
  bool replicas_equal = true;
  Counts vs_ddp;  // a sync written by hand: the gradients the optimizer stepped with against DDP's from the same locals
  // A whole-run step (the recorder kept digests only): the ranks' digests compared with each other, nothing
  // replayed; grads and params count nothing.
  bool whole_run = false;
};

// The cmp table at the first divergence: predicted (or rank 0's) against recorded, per parameter.
struct Divergence {
  int64_t step = -1;
  int rank = -1;
  std::string title;
  std::vector<CmpResult> rows;
  std::string missing;  // what the table cannot show (tensors kept as digests only), or ""
};

struct CheckResult {
  int world_size = 0;
  std::string backend, torch_version, run_dir;
  std::vector<int64_t> steps;
  bool order_known = false;  // the run's addition order is known: gradients are predicted bit for bit
  std::string order;         // which order, or why it is unknown
  std::string buckets;       // the layout the replay used, from iteration 1 on (FSDP2: its groups)
  bool sharded = false;      // an FSDP2 run: each rank holds its own shards (no replicas to compare)
  std::string zero1;         // a ZeRO-1 optimizer (each rank steps its share, then broadcasts), in words; "" : none
  bool step_exact = true;    // the optimizer step is predicted bit for bit
  std::string step_why;      // why not, when not
  Counts grads, params;
  // The whole-run steps' samples (sample_replay.h): steps replayed, sampled values compared and how they matched,
  // and why some step's all-reduce could not be replayed ("" : every one was).
  struct Sampled {
    int64_t steps = 0, values = 0, exact = 0, allclose = 0;
    std::string why;
  } sampled;
  // The whole-run steps' all-reduces against rounding (wsum_check.h): steps checked, rank-parameter pairs
  // checked and within the bound, the largest |difference| / bound among those, and why some step was not.
  struct Wsum {
    int64_t steps = 0, tensors = 0, within = 0;
    double worst = 0.0;
    std::string why;
  } wsum;
  // A sync written by hand (hand_sync.h): the script's own collectives replayed, how it averages, and the
  // gradients it stepped with against torch's DDP from the same local gradients (tensors, and values).
  struct Hand {
    bool present = false;
    int64_t steps = 0, collectives = 0, replayed = 0, exact = 0;
    std::string averaging;  // in words, from the first step explained
    std::string why;        // why some collective was not replayed ("" : every one was)
    Counts vs_ddp;
    int64_t values = 0, values_exact = 0, values_allclose = 0, values_different = 0;
    std::string ddp_why;    // why DDP's gradients were not predicted at some step ("" : they were)
  } hand;
  std::vector<StepLine> lines;
  DataSummary data;
  // Per step and rank, for the --report page: the norm of the rank's own (local, accumulated) gradient and
  // of the gradient DDP left (.grad after backward); NaN where not recorded.
  std::vector<std::vector<double>> local_norm, ddp_norm;
  std::vector<Finding> findings;
  Divergence first_divergence;
  bool problems() const;
};

// Reads every step of `run` (one step of all ranks in memory at a time) and checks it.
CheckResult check_run(const Run& run);

// The program's outputs: a line per step, the summary and the cmp table at the first divergence; the
// --json document; the --report page.
std::string format_text(const CheckResult& r);
std::string format_json(const CheckResult& r);
std::string format_html(const CheckResult& r);

}  // namespace ddplab::check
