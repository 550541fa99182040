// What check_run does with one DDP iteration's records besides replaying it: comparing recorded tensors with the
// predictions (NaN where both have NaN agrees), filling in what a digest trace left out once its digest matches,
// the step's counts, the gradient norms the report draws, which ranks' all-reduces pair, and what model
// averaging leaves.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/base/compare.h"
#include "src/check/check.h"
#include "src/collective/allreduce.h"

namespace ddplab::check {

// cmp(), except that a NaN where the prediction has a NaN too counts as agreeing.
CmpResult compare(const std::string& name, const std::vector<float>& got, const float* want);
bool all_zero(const std::vector<float>& v);
// The norm of the rank's own gradient in this step (its backwards' local gradients summed) and of the
// gradient DDP left; NaN where nothing was recorded.
std::pair<double, double> norms(const Manifest& m, const StepRecord& rec);
// What utils.average_parameters leaves on every rank; empty when it cannot be predicted.
std::vector<float> predicted_average(const Run& run, const std::vector<std::unique_ptr<StepRecord>>& prev,
                                     collective::Algorithm algorithm);
// A prediction whose digest is the recorded one is the recorded tensor: filled in as "<kind>/<name>".
void fill_in(StepRecord& rec, const std::string& key, const std::vector<int64_t>& shape, const float* v, size_t n);
// The optimizer step's inputs a digest trace leaves out, from `carried` where the digests agree; the first
// input still known by its digest only ("" : every input is there).
std::string fill_in_inputs(const Manifest& m, StepRecord& rec, const safetensors::TensorMap* carried);
// One compared tensor in the step's counts, overall and for rank r.
void count(Counts& all, std::vector<Counts>& per_rank, int r, const CmpResult& c);
// A row of the step's counts for a tensor compared by its digest.
CmpResult digest_row(const std::string& name, int64_t numel, bool same);
// The ranks whose backward ran without DDP's all-reduce while the others all-reduced (pairing shifts).
std::vector<int> unsynced_ranks(const std::vector<const StepRecord*>& recs);
// A backward of the record followed no forward through DDP (ddp_model.module(x), a second backward of one
// graph): DDP never armed its all-reduce. health.cc names it; the other findings leave it to that one.
bool forward_bypassed_ddp(const StepRecord& rec);

}  // namespace ddplab::check
