// Where a lab's DDP runs happen, for labs that compare several runs rank by rank (005, 006, 007): the simulator
// (every rank in this process) or this process as one real rank of a Gloo/NCCL group. The lab is written once
// against Group: on real ranks each rank trains its own replica through the communicator, then the ranks
// exchange what the lab compares (RankState), so that every process holds every rank's as the simulator does,
// and rank 0 says the lab's lines. A run whose world size is not the group's is simulated in this process,
// and the lab says so.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "src/comm/communicator.h"
#include "src/base/compare.h"
#include "src/ddp/config.h"
#include "src/ddp/trainer.h"
#include "src/base/flags.h"
#include "src/gpt/train.h"
#include "src/launch/run_flags.h"
#include "src/data/text_data.h"

namespace ddplab::lab {

// What a lab compares across ranks, as one rank holds it after training.
struct RankState {
  std::vector<std::string> names;          // parameters, then buffers: state_dict names
  std::vector<std::vector<float>> values;  // an int64 buffer (num_batches_tracked) as one float
  size_t num_params = 0;                   // values[0, num_params) are the parameters
  std::vector<float> losses;               // every batch's (micro-step's) loss, in order
  std::vector<float> clip_norms;           // clip_grad_norm_'s total norm per step (GPT)
  std::vector<float> mask;                 // Dropout's mask of the last training forward (models with Dropout)
  int64_t test_correct = -1;               // --dataset digits
  int64_t optimizer_state_numel = 0;       // floats of optimizer state this rank holds
};
RankState state_of(const ddp::Replica& rep, const std::vector<ddp::BatchLog>& log, int64_t rank, int64_t test_correct);
RankState state_of(const gpt::GptRank& rank);
// cmp of every tensor of `a` against `b`'s (the same model): parameters, then buffers.
std::vector<CmpResult> cmp_states(const RankState& a, const RankState& b);
// The parameters only, concatenated.
std::vector<float> parameter_values(const RankState& s);

// The lab's configuration `cfg` for where it runs: the world size (--world-size on the simulator [2], --nproc
// on real ranks, both in [2, 8]; left as it is under torchrun/mpirun, whose WORLD_SIZE the runner checks), and
// under --nccl-exact the simulator's all-reduce in NCCL's pinned ring order (the parts it simulates).
ddp::Config group_config(const Flags& flags, const dist::RunFlags& run, ddp::Config cfg);

class Group {
 public:
  Group() = default;                                        // the simulator
  explicit Group(comm::Communicator& comm) : comm_(&comm) {}  // one real rank
  bool real() const { return comm_ != nullptr; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  // True where a run at `world_size` runs on this group's ranks: always on the simulator; on real ranks when
  // it is the group's size.
  bool runs(int64_t world_size) const { return !comm_ || world_size == comm_->world_size(); }
  // "2 simulated ranks (one process)" | "2 real gloo ranks (one process each)"
  std::string describe(int64_t world_size) const;
  // One line for a run at `world_size` that this group cannot run on its ranks, else "".
  std::string simulated_note(int64_t world_size) const;
  // The lab's lines: printed (lab::print_line) on the simulator and on real rank 0; other ranks stay quiet.
  void say(const std::string& text) const;
  // Every rank's `mine`, in rank order (the simulator: `mine` alone).
  std::vector<std::string> gather(const std::string& mine) const;
  std::vector<RankState> gather(const RankState& mine) const;
  // What each rank computes for itself, `fn(rank)`, in rank order: every rank's in this process on the
  // simulator (world_size of them); on real ranks each process its own, gathered.
  std::vector<std::string> each_rank(int64_t world_size, const std::function<std::string(int64_t rank)>& fn) const;
  comm::Communicator* comm() const { return comm_; }

 private:
  comm::Communicator* comm_ = nullptr;
};

// One DDP run of a sequential model (the MLP, the CNN).
struct Trained {
  ddp::Config cfg;           // the replicas point into it
  bool simulated = true;     // false: trained by this group's real ranks
  ddp::SimResult sim;        // simulated: every rank's replicas, logs and reports
  ddp::RankResult mine;      // real ranks: this rank's
  std::vector<RankState> ranks;  // every rank's, in rank order
  int64_t test_size = 0;     // --dataset digits
  // train(..., single_device): one model on the union of the shards (the simulator's; on real ranks rank 0
  // simulates it in its own process), its correct test predictions.
  int64_t single_device_test_correct = -1;
  // This process's own replica (rank 0's on the simulator): its optimizer, its hook reports.
  const ddp::Replica& own() const { return simulated ? *sim.replicas[0] : *mine.replica; }
  const std::vector<std::vector<ddp::HookReport>>& hook_reports() const {
    return simulated ? sim.hook_reports : mine.hook_reports;
  }
};
std::unique_ptr<Trained> train(const Group& g, const ddp::Config& cfg, bool single_device = false);

// One DDP run of the tiny GPT.
struct TrainedGpt {
  gpt::RunConfig cfg;
  bool simulated = true;
  gpt::GptSimResult sim;                  // simulated: every rank
  std::unique_ptr<gpt::GptRank> mine;     // real ranks: this rank's
  ddp::TrainLog log;                      // real ranks: this rank's loop result (notes, error)
  std::vector<RankState> ranks;           // every rank's
  int64_t allreduces = 0, buckets_reduced = 0;  // synchronised backwards, and the buckets they reduced
  gpt::GptRank& own() { return simulated ? *sim.ranks[0] : *mine; }
  // Rank r's GptRank: any rank's when simulated, this process's own on real ranks (else logic_error).
  gpt::GptRank& rank(int64_t r);
  const std::optional<ddp::UnfinishedReduction>& error() const { return simulated ? sim.error : log.error; }
};
std::unique_ptr<TrainedGpt> train_gpt(const Group& g, const gpt::RunConfig& cfg, const TextData& data);

class LabReport;
// A lab written against Group, whole: its flags (lab_flag_names(false) and `own`; --help prints `usage` and
// lab_usage(false); a positional argument is refused), its configuration (`config(flags)`, then group_config),
// the --report page (refused on real ranks), and `body`: once on the simulator, or in every real rank (src/launch/
// runner) with that rank's Group and the configuration at the group's world size (2..8; the ranks must agree on
// all of its flags). Returns the exit status, the page's included.
int run_group_lab(int argc, char** argv, const std::vector<const char*>& own, const char* usage,
                  const std::function<ddp::Config(const Flags&)>& config,
                  const std::function<int(Group&, const ddp::Config&, LabReport&)>& body);

}  // namespace ddplab::lab
