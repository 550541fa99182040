// The questions learners ask about DDP, one topic each: a topic runs the simulator on the learner's
// configuration and on the runs that answer the question (one device at another batch, another learning rate,
// another loss scale, ...), prints the numbers side by side, and ends in `answer:` lines that say the answer
// in words, computed from those numbers. sim/ddp_questions runs them; docs/questions.md lists them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/base/compare.h"
#include "src/base/flags.h"
#include "src/ddp/config.h"
#include "src/ddp/trainer.h"

namespace ddplab::questions {

struct Topic {
  const char* name;      // what the learner types: ddp_questions NAME
  const char* question;  // the question, in the learner's words
  // Changes the shared flags' defaults before they are read (so that the topic's own defaults show a case
  // that answers it; every flag the learner gives still wins).
  void (*defaults)(ddp::Config& cfg);
  // Refuses, with a UsageError, a configuration the topic cannot answer (null: every one), before anything is
  // printed.
  void (*check)(const ddp::Config& cfg);
  // Prints the runs and the answer. The config is the learner's, validated.
  void (*run)(const ddp::Config& cfg);
};

// Every topic, in the order docs/questions.md lists them.
const std::vector<Topic>& topics();
const Topic* find_topic(const std::string& name);

// One simulated run kept with its config (the replicas point at it).
struct Run {
  std::string label;
  std::unique_ptr<ddp::Config> cfg;
  ddp::SimResult res;
  double final_loss = 0;  // rank 0's model's loss on the whole training set after training (model.eval())
};
std::unique_ptr<Run> simulate(const std::string& label, const ddp::Config& cfg, const ddp::SimHooks& hooks = {});

// The same training on one device: world_size 1 (DistributedSampler with one replica takes the same
// randperm as every world size, so one device at batch W x B steps through the very samples DDP's W ranks
// take at B each), at batch size `batch`.
ddp::Config one_device(const ddp::Config& cfg, int64_t batch);

// The mean of the logged batch losses of each epoch, over every rank (what a learner's logs average to).
std::vector<double> epoch_losses(const Run& run);
// Optimizer steps per epoch: the DataLoader's batches per rank, one step per --no-sync K of them.
int64_t steps_per_epoch(const ddp::Config& cfg);

// Every parameter of rank `rank_a` of `a` against rank `rank_b` of `b` (rank 0 of each unless given), summed
// up: how many tensors are exact and allclose, and the largest |a - b|.
struct ModelCmp {
  int64_t tensors = 0, exact = 0, approximate = 0;
  float maxdiff = 0.0f;
  bool all_exact() const { return exact == tensors; }
  bool all_close() const { return approximate == tensors; }
};
ModelCmp cmp_params(const Run& a, const Run& b, size_t rank_a = 0, size_t rank_b = 0);
// "exact: False | approximate: True  | maxdiff: 1.1920929e-07 (12 of 12 tensors allclose, 3 exact)"
std::string format_model_cmp(const ModelCmp& c);

// A table: a header row, then one row per run of the per-epoch losses and the final training-set loss.
std::string loss_table(const std::vector<const Run*>& runs);

// The layers that make one device differ from DDP's ranks whatever the order of additions: "BatchNorm
// (statistics over each rank's batch only)", "Dropout (ranks seeded alike draw the very same mask ...)"; "" when none.
std::string per_rank_layers(const ddp::Config& cfg);

// Python's repr of a float, for numbers a learner reads.
std::string py(double v);

}  // namespace ddplab::questions
