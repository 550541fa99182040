// The run's health beyond DDP's arithmetic (health.cc): NaN and infinities, where they first appear and why;
// parameters DDP does not reduce that changed; .grad carried from step to step; backwards whose forward did not
// go through DDP (ddp_model.module(x), a second backward).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/check/findings/findings.h"

namespace ddplab::check {

class Health {
 public:
  explicit Health(const Run& run);
  // One iteration: recs[r] rank r's record (null: none); prev[r] its previous record (null: this is its first).
  void step(const std::vector<const StepRecord*>& recs, const std::vector<const StepRecord*>& prev, Findings& found);
  // The parameters DDP does not reduce agree on every rank at the last step given to step().
  bool outside_equal() const { return outside_equal_; }
  // The findings over the whole run: the first NaN or inf, and the parameters DDP does not reduce that changed.
  void after_run(Findings& found);

 private:
  struct First {
    int64_t step = -1;
    int rank = -1;
    std::string stage, name;
    bool at_start = false;  // the rank's first recorded step
  };
  struct Outside {
    int64_t changed_step = -1, differ_step = -1, last_diff_step = -1;
    std::vector<int> changed_ranks;
    int differ_rank = -1, base_rank = -1;
    double maxdiff = 0;
  };
  // A parameter whose values at its rank's first recorded step are far beyond anything an initialiser draws
  // (|x| > 1e30, finite): memory never initialised (to_empty(), torch.empty without an init_).
  struct Huge {
    int64_t step = -1;
    int rank = -1;
    std::string name;
    double value = 0;
    int zero_params = 0;  // of that rank's parameters, how many hold only zeros then
  };
  const Run& run_;
  First first_;
  Huge huge_;
  std::vector<int> first_ranks_, bad_params_ranks_;
  int64_t bad_params_step_ = -1, all_bad_step_ = -1, grads_not_cleared_step_ = -1;
  std::vector<std::map<std::string, uint32_t>> outside_first_;  // [rank]: name -> its first recorded digest
  std::map<std::string, Outside> outside_;
  bool outside_equal_ = true;
};

}  // namespace ddplab::check
