#include "src/check/check.h"

#include <algorithm>
#include <tuple>

#include "src/check/run_check.h"

namespace ddplab::check {

void Counts::add(const CmpResult& r) {
  ++checked;
  if (r.exact) {
    ++exact;
  } else if (r.approximate) {
    ++allclose;
  } else {
    ++different;
  }
}

bool CheckResult::problems() const {
  for (const Finding& f : findings)
    if (f.severity == "problem") return true;
  return false;
}

CheckResult check_run(const Run& run) { return RunCheck(run).run(); }

RunCheck::RunCheck(const Run& run)
    : run_(run),
      m_(run.first()),
      ws_(run.world_size()),
      replay_(run),
      found_(run),
      health_(run),
      hand_(run, &replay_),
      zero1_(run),
      pool_(std::min(available_cores(), run.world_size())),
      next_(static_cast<size_t>(ws_), 0),
      head_(static_cast<size_t>(ws_)),
      prev_(static_cast<size_t>(ws_)),
      missing_first_(m_.missing_params.size()),
      carried_(static_cast<size_t>(ws_)),
      carried_step_(static_cast<size_t>(ws_), -1) {
  res_.world_size = ws_;
  res_.backend = m_.backend;
  res_.torch_version = m_.torch_version;
  res_.run_dir = run.dir;
  res_.steps = run.steps;
  res_.order_known = replay_.exact_expected() && replay_.grads_checked();
  res_.order = replay_.order();
  res_.sharded = replay_.sharded();
  run_findings(run, replay_, found_);
  zero1_.run_findings(found_);
  res_.zero1 = zero1_.describe();
  const bool adam = m_.optimizer_class == "Adam" || m_.optimizer_class == "AdamW";
  modelled_optimizer_ = adam || m_.optimizer_class == "SGD";
  if (adam && !m_.sqrt_exact) {
    res_.step_exact = false;
    res_.step_why = "this torch build's float sqrt is not IEEE's (the recorder's probe: a pip build's CPU sqrt is "
                    "MKL's VML, within 1 ulp), and " + m_.optimizer_class + " divides by sqrt(exp_avg_sq): compared allclose";
  }
  for (int r = 0; r < ws_; ++r) data_.push_back(read_data(run.dir, r));
  for (const Averaging& a : m_.averaging) averaged_.insert(a.after_step);
  // The ranks' files are read, and their optimizer steps predicted, side by side (each rank's work touches only
  // its own records); what is compared and said stays in rank order.
  replay_.set_pool(&pool_);
}

// Each DDP iteration of every rank, through the passes in order.
CheckResult RunCheck::run() {
  while (next_iteration()) {
    StepLine line;
    line.step = step_;
    line.rank_grads.resize(static_cast<size_t>(ws_));
    line.rank_params.resize(static_cast<size_t>(ws_));
    for (const StepRecord* rec : recs_) line.ran.push_back(rec != nullptr);
    absent_ranks();
    // A whole-run step on every rank that ran it: digests only, compared across ranks instead of replayed.
    digests_only_ = std::all_of(recs_.begin(), recs_.end(), [](const StepRecord* rec) { return !rec || rec->digests_only; });
    line.whole_run = digests_only_;
    health_pass();
    sync_pass(line);
    optimizer_pass(line);
    replica_pass(line);
    whole_run_pass();
    end_of_step(line);
  }
  after_run();
  return std::move(res_);
}

// The next records of the ranks whose record an iteration takes are read on a thread of their own while it is
// replayed: a trace the recorder wrote past the page cache comes from the disk, and reading it overlaps the
// arithmetic (one more step of those ranks in memory).
std::vector<std::pair<int, int64_t>> RunCheck::records_to_read() {
  std::vector<std::pair<int, int64_t>> to_read;  // (rank, step)
  for (int r = 0; r < ws_; ++r) {
    const auto& steps = run_.ranks[static_cast<size_t>(r)].steps;
    if (!head_[static_cast<size_t>(r)] && next_[static_cast<size_t>(r)] < steps.size())
      to_read.push_back({r, steps[next_[static_cast<size_t>(r)]++]});
  }
  return to_read;
}

// The ranks' records merged by DDP iteration, (segment, index): one record per rank in memory, plus each rank's
// previous one (its parameters after the step only).
bool RunCheck::next_iteration() {
  if (ahead_.valid()) {
    for (auto& [r, rec] : ahead_.get()) head_[static_cast<size_t>(r)] = std::move(rec);
  } else {  // the first records, side by side
    const auto to_read = records_to_read();
    parallel_for(&pool_, to_read.size(), 1e9, [&](size_t k) {
      head_[static_cast<size_t>(to_read[k].first)] =
          std::make_unique<StepRecord>(read_step(run_, to_read[k].first, to_read[k].second));
    });
  }
  const StepRecord* lowest = nullptr;
  for (const auto& h : head_)
    if (h && (!lowest || std::tie(h->segment, h->index) < std::tie(lowest->segment, lowest->index))) lowest = h.get();
  if (!lowest) return false;
  const auto key = std::make_pair(lowest->segment, lowest->index);
  cur_.clear();
  cur_.resize(static_cast<size_t>(ws_));
  recs_.assign(static_cast<size_t>(ws_), nullptr);
  for (int r = 0; r < ws_; ++r) {
    auto& h = head_[static_cast<size_t>(r)];
    if (h && std::make_pair(h->segment, h->index) == key) {
      cur_[static_cast<size_t>(r)] = std::move(h);
      recs_[static_cast<size_t>(r)] = cur_[static_cast<size_t>(r)].get();
    }
  }
  if (auto to_read = records_to_read(); !to_read.empty())
    ahead_ = std::async(std::launch::async, [this, to_read]() {
      Read got;
      for (const auto& [r, step] : to_read) got.emplace_back(r, std::make_unique<StepRecord>(read_step(run_, r, step)));
      return got;
    });
  previous_params_filled_in();
  ref_ = nullptr;
  for (const StepRecord* rec : recs_) ref_ = ref_ ? ref_ : rec;
  step_ = ref_->step;
  if (first_ && recs_[0])
    for (size_t i = 0; i < m_.missing_params.size(); ++i)
      recs_[0]->digest("param_before", m_.params[m_.missing_params[i]].name, &missing_first_[i]);
  return true;
}

// param_before/ left out by the recorder: the rank's previous step's param_after/ (a copy: both are compared).
void RunCheck::previous_params_filled_in() {
  for (int r = 0; r < ws_; ++r) {
    StepRecord* rec = cur_[static_cast<size_t>(r)].get();
    if (!rec || !rec->param_before_is_previous) continue;
    const StepRecord* p = prev_[static_cast<size_t>(r)].get();
    if (!p || p->step + 1 != rec->step)
      throw TraceError(rec->path + ": its param_before is the previous step's param_after, but step " +
                       std::to_string(rec->step - 1) + " is not recorded");
    for (const TensorInfo& t : m_.params) {
      uint32_t d = 0;
      if (const safetensors::Tensor* a = p->find("param_after", t.name))
        rec->tensors["param_before/" + t.name] = *a;
      else if (p->digest("param_after", t.name, &d))
        rec->crc32["param_before/" + t.name] = d;
    }
  }
}

std::vector<const StepRecord*> RunCheck::previous() const {
  std::vector<const StepRecord*> before(static_cast<size_t>(ws_));
  for (int r = 0; r < ws_; ++r) before[static_cast<size_t>(r)] = prev_[static_cast<size_t>(r)].get();
  return before;
}

void RunCheck::after_run() {
  if (!m_.missing_params.empty() || !m_.missing_unchecked.empty()) {
    std::vector<bool> changed(m_.missing_params.size(), false);
    uint32_t d = 0;
    for (size_t i = 0; i < m_.missing_params.size() && prev_[0]; ++i)
      changed[i] = !prev_[0]->digest("param_after", m_.params[m_.missing_params[i]].name, &d) || d != missing_first_[i];
    optimizer_findings(m_, changed, found_);
  }
  if (m_.hand) HandSync::collective_errors(run_, found_);
  health_.after_run(found_);
  seen_.steps = !res_.lines.empty();
  what_the_run_did(m_, seen_, found_);
  res_.buckets = replay_.buckets();
  if (m_.hand) res_.hand = hand_.result();
  res_.sampled = {sampled_.steps, sampled_.values, sampled_.exact, sampled_.allclose, sampled_.why};
  res_.wsum = {wsums_.steps, wsums_.tensors, wsums_.within, wsums_.worst, wsums_.why};
  if (!data_findings(run_, data_, &found_, &res_.data)) {
    bool loaders = false;
    for (const RankData& d : data_) loaders = loaders || !d.loaders.empty();
    res_.data.verdict = found_.after_run(loaders);
    res_.data.source = "fingerprints";
  }
  res_.findings = found_.take();
}

}  // namespace ddplab::check
