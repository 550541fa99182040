#include "src/check/findings/findings.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "src/check/replay/step_compare.h"
#include "src/check/replay/wsum_check.h"

namespace ddplab::check {
namespace {

const std::vector<float>* tensor(const StepRecord& rec, const char* kind, const std::string& name) {
  const safetensors::Tensor* t = rec.find(kind, name);
  return t ? &t->data : nullptr;
}

// Equal values, a NaN equal to a NaN (+0 equals -0): replicas that overflowed alike still agree.
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  if (&a == &b) return true;  // grad_step elided as grad: the same tensor
  if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) return true;  // the usual case, fast
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

}  // namespace

// The first parameter whose `kind` tensor differs between two records (a tensor absent on one side
// differs), or "".
std::string first_difference(const Manifest& m, const StepRecord& a, const char* kind_a, const StepRecord& b,
                             const char* kind_b) {
  for (const TensorInfo& p : m.params) {
    const auto* x = tensor(a, kind_a, p.name);
    const auto* y = tensor(b, kind_b, p.name);
    if (x && y) {
      if (!same_values(*x, *y)) return p.name;
      continue;
    }
    // A digest on either side (the recorder kept one in place of the tensor): compared bit for bit.
    uint32_t dx = 0, dy = 0;
    const bool hx = a.digest(kind_a, p.name, &dx), hy = b.digest(kind_b, p.name, &dy);
    if (hx != hy || (hx && dx != dy)) return p.name;
  }
  return "";
}

void Findings::digest_differs(const char* what, int64_t step, int r, const std::string& name, bool exact_expected,
                              bool fold64, Divergence* div) {
  const bool grad = std::string(what) == "grad";
  const std::string title = grad ? fmt::format("rank {}'s .grad after backward vs DDP's predicted average", r)
                                 : fmt::format("rank {}'s parameters after optimizer.step() vs torch.optim's arithmetic", r);
  if (div->step < 0) {
    *div = {step, r, title, {}, ""};
    div->missing = "the trace keeps digests of these tensors after its first step, so it says which differ, "
                   "not by how much: record again with DDPTrace(..., full=True) for this table";
  }
  const std::string how = fmt::format("its {} digest differs from the prediction's (the trace keeps digests, not "
                                      "values: DDPTrace(..., full=True) records them, to see by how much)",
                                      fold64 ? "fold64" : "CRC-32");
  if (grad)
    add("grad-not-as-predicted", exact_expected ? "problem" : "note", exact_expected ? "" : "bits", step, r, name,
        fmt::format("step {}, rank {}: '{}'.grad after backward is not bit for bit DDP's average of the ranks' local "
                    "gradients: {}. Usually a custom comm hook that does not average (all-reduce SUM without "
                    "dividing, no all-reduce at all), or a hook on the parameter that changes its gradient inside "
                    "backward",
                    step, r, name, how));
  else
    add("step-not-as-predicted", exact_expected ? "problem" : "note", "", step, r, name,
        fmt::format("step {}, rank {}: '{}' after optimizer.step() is not bit for bit what {} computes from the "
                    "gradient it saw and its state: {}. Usually an optimizer ddplab models another way, or the "
                    "parameter was changed inside step()",
                    step, r, name, run_.first().optimizer_class, how));
}

namespace {

std::vector<CmpResult> table(const Manifest& m, const StepRecord& got, const char* kind_got, const StepRecord& want,
                             const char* kind_want) {
  std::vector<CmpResult> rows;
  for (const TensorInfo& p : m.params) {
    const auto* x = tensor(got, kind_got, p.name);
    const auto* y = tensor(want, kind_want, p.name);
    if (x && y) rows.push_back(cmp(p.name, x->data(), y->data(), static_cast<int64_t>(x->size())));
  }
  return rows;
}

std::string maxdiff(const CmpResult& c) { return python_float_repr(c.maxdiff); }

// The two gradient stages of the replica invariant, in the order a step meets them: what DDP left after
// backward, then what the optimizer saw.
struct Stage {
  const char* kind;      // the recorded tensor
  const char* cause;     // replicas-diverged's cause when it is the first stage to differ
  const char* what;      // for the cmp table's title
  const char* before;    // the message: before, the rank, the parameter, differs, usually
  const char* differs;
  const char* usually;
};
constexpr Stage kStages[] = {
    {"grad", "gradients", ".grad after DDP's backward", "after backward",
     "differs from rank {}'s: DDP's all-reduce did not leave the same average on every rank",
     "Usually a comm hook that does not all-reduce, no_sync() on some ranks only, or ranks that ran different "
     "backwards"},
    {"grad_step", "gradients-changed", ".grad at optimizer.step()", "DDP left equal gradients on every rank, but",
     "was changed before optimizer.step() differently from rank {}'s",
     "Usually rank-dependent gradient code after backward (scaling, clipping with a per-rank norm, an `if rank "
     "== ...` branch)"},
};

const Stage* first_stage_differing(const Manifest& m, const StepRecord& a, const StepRecord& b, std::string* name) {
  for (const Stage& s : kStages) {
    *name = first_difference(m, a, s.kind, b, s.kind);
    if (!name->empty()) return &s;
  }
  return nullptr;
}

}  // namespace

std::string sampler_advice(const Run& run) {
  if (!run.first().lightning_strategy.empty())
    return "Lightning inserts a DistributedSampler itself: leave Trainer(use_distributed_sampler=True) (the default) "
           "and do not pass a sampler of your own";
  if (run.first().framework == "fabric")
    return "Fabric shards the data itself: loader = fabric.setup_dataloaders(loader) puts a DistributedSampler in it "
           "(use_distributed_sampler=True, the default)";
  if (run.first().framework == "accelerate")
    return "accelerate shards the data itself: pass the DataLoader to accelerator.prepare(model, optimizer, loader) "
           "and iterate what it returns (each rank then gets its own part)";
  return "DataLoader(dataset, sampler=DistributedSampler(dataset)) with the same seed on every rank, and "
         "sampler.set_epoch(epoch) at the start of each epoch";
}

void Findings::add(const std::string& kind, const std::string& severity, const std::string& cause, int64_t step,
                   int rank, const std::string& name, const std::string& message) {
  const bool per_name = kind == "unused-parameters" || kind == "not-reduced-by-ddp";  // one each, said once
  const auto key = std::make_tuple(kind, cause + "|" + (per_name ? name : ""), rank);
  auto it = first_.find(key);
  if (it != first_.end()) {
    ++repeats_[it->second];
    std::vector<int64_t>& steps = repeat_steps_[it->second];
    if (steps.size() < 100000) steps.push_back(step);
    return;
  }
  first_[key] = list_.size();
  list_.push_back({kind, severity, cause, name, message, step, rank, 0, {}});
}

std::vector<Finding> Findings::take() {
  for (const auto& [i, n] : repeats_) list_[i].repeats = n;
  for (auto& [i, steps] : repeat_steps_) list_[i].repeat_steps = std::move(steps);
  repeats_.clear();
  repeat_steps_.clear();
  return std::move(list_);
}

void Findings::grads_vs_prediction(int64_t step, int r, const std::vector<CmpResult>& rows, bool order_known,
                                   Divergence* div) {
  for (const CmpResult& c : rows) {
    if (c.exact || (!order_known && c.approximate)) continue;
    if (div->step < 0) *div = {step, r, fmt::format("rank {}'s .grad after backward vs DDP's predicted average", r), rows, ""};
    if (!c.approximate) {
      add("grad-not-as-predicted", "problem", "", step, r, c.name,
          fmt::format("step {}, rank {}: '{}'.grad after backward is not DDP's average of the ranks' local gradients "
                      "({} of {} values differ, maxdiff {}). Usually a custom comm hook that does not average "
                      "(all-reduce SUM without dividing, no all-reduce at all), or a hook on the parameter that "
                      "changes its gradient inside backward",
                      step, r, c.name, c.num_different, c.numel, maxdiff(c)));
    } else {
      add("grad-not-as-predicted", "note", "bits", step, r, c.name,
          fmt::format("step {}, rank {}: '{}'.grad is allclose to the prediction but not bit for bit ({} of {} "
                      "values differ, maxdiff {}) although the addition order is known: a backend or torch build "
                      "that adds in another order",
                      step, r, c.name, c.num_different, c.numel, maxdiff(c)));
    }
  }
}

void Findings::step_vs_prediction(int64_t step, int r, const std::vector<CmpResult>& rows, bool exact_expected,
                                  Divergence* div) {
  for (const CmpResult& c : rows) {
    if (c.exact || (!exact_expected && c.approximate)) continue;
    if (div->step < 0) *div = {step, r, fmt::format("rank {}'s parameters after optimizer.step() vs torch.optim's arithmetic", r), rows, ""};
    add("step-not-as-predicted", c.approximate ? "note" : "problem", "", step, r, c.name,
        fmt::format("step {}, rank {}: '{}' after optimizer.step() is not what {} computes from the gradient it saw "
                    "and its state ({} of {} values differ, maxdiff {}): an optimizer ddplab models another way, "
                    "or the parameter was changed inside step()",
                    step, r, c.name, run_.first().optimizer_class, c.num_different, c.numel, maxdiff(c)));
  }
}

void Findings::changed_outside_step(int64_t step, int r, const std::string& name) {
  add("changed-outside-step", "problem", "outside-step", step, r, name,
      fmt::format("step {}: rank {}'s shard of '{}' changed outside optimizer.step() (it differs from what the "
                  "previous step left). Under FSDP each rank holds only its shard, so code that edits parameters "
                  "(under torch.no_grad(), a load on some ranks only) changes the model for good",
                  step, r, name));
}

void Findings::unreduced_before_step(int64_t step) {
  add("not-reduced", "problem", "before-step", step, -1, "",
      fmt::format("step {}: optimizer.step() ran with gradients of the step's last backward(s) not yet reduce-scattered: "
                  "gradient sync was on for an earlier micro-batch and off for the last, so the step used a partial "
                  "gradient and the rest reaches the shards a step later. Switch sync on for the last micro-batch of "
                  "each step (model.set_requires_gradient_sync(is_last_micro_batch))",
                  step));
}

bool Findings::replicas(const std::vector<const StepRecord*>& recs, const std::vector<std::string>& moved,
                        bool first_step, Divergence* div) {
  const Manifest& m = run_.first();
  // The reference is a rank the most others agree with (the first such): at 3 ranks or more the odd one out is
  // named, not every rank that differs from rank 0; at 2 ranks (or a tie) the first rank.
  const StepRecord* ref = nullptr;
  for (const StepRecord* rec : recs) ref = ref ? ref : rec;
  const bool all_equal = std::all_of(recs.begin(), recs.end(), [&](const StepRecord* rec) {
    return !rec || first_difference(m, *rec, "param_after", *ref, "param_after").empty();
  });
  size_t agree_most = 0;
  for (const StepRecord* a : recs) {
    if (!a || all_equal) continue;
    size_t agree = 0;
    for (const StepRecord* b : recs) agree += b && first_difference(m, *a, "param_after", *b, "param_after").empty();
    if (agree > agree_most) ref = a, agree_most = agree;
  }
  const int r0 = ref->rank;
  const auto synced = [](const StepRecord& rec) {
    for (const Backward& b : rec.backwards)
      if (b.sync) return true;
    return false;
  };
  bool equal = true;
  for (const StepRecord* rec : recs) {
    if (!rec || rec == ref) continue;
    const std::string after = first_difference(m, *rec, "param_after", *ref, "param_after");
    if (after.empty()) continue;
    equal = false;
    const int rank = rec->rank;
    whole_run_named_.insert(rank);  // apart from here on: explained here, not again by a whole-run step
    const std::string before = first_difference(m, *rec, "param_before", *ref, "param_before");
    std::string name;
    const auto note_div = [&](const std::string& title, const char* kind) {
      if (div->step >= 0) return;
      *div = {ref->step, rank, title, table(m, *rec, kind, *ref, kind), ""};
      if (div->rows.empty())
        div->missing = "the trace keeps digests of these tensors at this step, not their values, so it says that they "
                       "differ, not by how much; DDPTrace(..., full=True) records the values";
    };
    const std::string& moved_r = moved[static_cast<size_t>(rank)];
    const std::string& moved_0 = moved[static_cast<size_t>(r0)];
    if (!before.empty()) {
      if (diverged_ && moved_r.empty() && moved_0.empty()) continue;  // an earlier divergence carried on
      if (m.hand && first_step) continue;  // weights never broadcast at the start: hand-sync/no-broadcast names it
      const int who = !moved_r.empty() ? rank : !moved_0.empty() ? r0 : rank;
      const std::string& changed = !moved_r.empty() ? moved_r : !moved_0.empty() ? moved_0 : before;
      note_div(fmt::format("rank {}'s parameters before optimizer.step() vs rank {}'s", rank, r0), "param_before");
      add("replicas-diverged", "problem", "outside-step", ref->step, who, changed,
          fmt::format("step {}: rank {}'s '{}' changed outside optimizer.step() (it differs from what the previous "
                      "step left{}), so the replicas no longer agree. Usually code that edits parameters on some "
                      "ranks only (under torch.no_grad(), a rank-dependent init or load after DDP(...))",
                      ref->step, who, changed, first_step ? ", or from rank " + std::to_string(r0) + "'s at the first recorded step" : ""));
    } else if (forward_bypassed_ddp(*rec) || forward_bypassed_ddp(*ref)) {
      // module(x) or a second backward on one of the two: not-all-reduced names it; the box shows the step.
      note_div(fmt::format("rank {}'s parameters after optimizer.step() vs rank {}'s", rank, r0), "param_after");
      continue;
    } else if (m.hand && !(name = first_difference(m, *rec, "grad_step", *ref, "grad_step")).empty()) {
      // The script's own sync left the ranks different gradients.
      note_div(fmt::format("rank {}'s .grad at optimizer.step() vs rank {}'s", rank, r0), "grad_step");
      add("replicas-diverged", "problem", "gradients", ref->step, rank, name,
          fmt::format("step {}: rank {} stepped with another gradient of '{}' than rank {}: the script's own sync "
                      "did not give every rank the same average{}", ref->step, rank, name, r0,
                      diverged_ ? "" : " (the hand-sync findings say where)"));
    } else if (m.sharded) {
      continue;  // ZeRO-1, equal gradients: zero1/not-broadcast, or the owner's step checked on every rank, says why
    } else if (!m.hand && (!synced(*rec) || !synced(*ref))) {
      // No all-reduce ran in this step on one of the two: the gradients were never averaged.
      const int who = !synced(*rec) ? rank : r0;
      name = first_difference(m, *rec, "grad_step", *ref, "grad_step");
      note_div(fmt::format("rank {}'s .grad at optimizer.step() vs rank {}'s", rank, r0), "grad_step");
      add("replicas-diverged", "problem", "gradients", ref->step, who, name.empty() ? after : name,
          fmt::format("step {}: no all-reduce ran on rank {} in this step (every backward ran under no_sync()), so its "
                      "gradient was never averaged with the other ranks' and the replicas step apart. no_sync() is "
                      "for accumulating: leave the last micro-batch of each step outside it",
                      ref->step, who));
    } else if (const Stage* stage = first_stage_differing(m, *rec, *ref, &name)) {
      note_div(fmt::format("rank {}'s {} vs rank {}'s", rank, stage->what, r0), stage->kind);
      add("replicas-diverged", "problem", stage->cause, ref->step, rank, name,
          fmt::format("step {}: {} rank {}'s '{}'.grad {}. {}", ref->step, stage->before, rank, name,
                      fmt::format(fmt::runtime(stage->differs), r0), stage->usually));
    } else if (join_skew_) {
      add("replicas-diverged", "note", "join-optimizer-state", ref->step, rank, after,
          fmt::format("step {}: every rank saw the same parameters and gradients, but rank {}'s '{}' stepped to other "
                      "values than rank {}'s: under Join a rank that ran out of data skips optimizer.step(), so its "
                      "optimizer state (momentum, Adam's moments) lags the others'. Join makes the parameters equal "
                      "again when it ends (the rank that stepped last broadcasts them), not the optimizer state; "
                      "torch behaves so by design",
                      ref->step, rank, after, r0));
    } else {
      note_div(fmt::format("rank {}'s parameters after optimizer.step() vs rank {}'s", rank, r0), "param_after");
      add("replicas-diverged", "problem", "optimizer", ref->step, rank, after,
          fmt::format("step {}: every rank's optimizer saw the same parameters and gradients, but rank {}'s '{}' "
                      "stepped to other values than rank {}'s. Usually rank-dependent optimizer settings (lr, "
                      "weight decay, a scheduler stepped on some ranks) or optimizer state that differs",
                      ref->step, rank, after, r0));
    }
  }
  if (!equal) diverged_ = true;
  return equal;
}

void Findings::per_step(const std::vector<const StepRecord*>& present) {
  const Manifest& m = run_.first();
  std::vector<const StepRecord*> recs;
  for (const StepRecord* p : present)
    if (p) recs.push_back(p);
  const int64_t step = recs[0]->step;
  std::vector<std::pair<int, double>> factors;  // FSDP2: each rank's one factor, which must be the same everywhere
  for (const StepRecord* rec_p : recs) {
    const StepRecord& rec = *rec_p;
    // .grad changed between the end of backward and the step: the factor, and whether it is one factor.
    double gg = 0, gs = 0, ss = 0;
    std::string first;
    for (const TensorInfo& p : m.params) {
      const auto* g = tensor(rec, "grad", p.name);
      const auto* s = tensor(rec, "grad_step", p.name);
      if (!g || !s || same_values(*g, *s)) continue;
      if (first.empty()) first = p.name;
      for (size_t k = 0; k < g->size(); ++k) {
        gg += double((*g)[k]) * (*g)[k];
        gs += double((*g)[k]) * (*s)[k];
        ss += double((*s)[k]) * (*s)[k];
      }
    }
    // A whole-run step keeps digests only: that .grad changed shows, not how.
    std::string changed_digest;
    for (size_t i = 0; i < m.params.size() && first.empty() && rec.digests_only && changed_digest.empty(); ++i) {
      uint32_t g = 0, s = 0;
      if (rec.digest("grad", m.params[i].name, &g) && rec.digest("grad_step", m.params[i].name, &s) && g != s)
        changed_digest = m.params[i].name;
    }
    // A backward after the step's last all-reduce (a second backward of one graph) changed .grad: said as such.
    bool late_backward = false;
    for (size_t k = 0, synced = 0; k < rec.backwards.size(); ++k) {
      synced += rec.backwards[k].sync;
      late_backward = late_backward || (synced && !rec.backwards[k].sync);
    }
    // Each kind of change its own finding (cause), so that a clip repeated at every step does not hide the one
    // step where something else changed .grad too: that step is named, its repeats listed apart.
    const auto near_one = [](double factor) { return std::abs(factor - 1.0) < 1e-5; };  // 1 up to rounding
    const auto changed = [&](const std::string& how, const std::string& name, double factor, const std::string& seen) {
      const std::string what = fmt::format("step {}, rank {}: .grad was", step, rec.rank);
      add("grads-changed-before-step", "note", how, step, rec.rank, name,
          how == "rounding" && !seen.empty()  // the sums see a change no larger than rounding, not what it is
              ? fmt::format("{} changed between backward and optimizer.step(), by no more than rounding (first '{}'{}): "
                            "the already averaged gradients all-reduced and divided again, a round trip through "
                            "another dtype, or an edit of a few last bits", what, name, seen)
          : how == "rounding"
              ? fmt::format("{} changed between backward and optimizer.step() by rounding only (first '{}'; a factor "
                            "of 1 up to a few ulps): the already averaged gradients all-reduced and divided again, "
                            "or a round trip through another dtype", what, name)
          : how == "one-factor"
              ? fmt::format("{} scaled by {:.6g} between backward and optimizer.step() (first '{}'{}): "
                            "clip_grad_norm_, or a manual rescale such as loss scaling", what, factor, name, seen)
          : how == "edited"
              ? fmt::format("{} changed between backward and optimizer.step(), not by one factor (first '{}'{}): "
                            "clip_grad_value_, or code that edits gradients (after a clip too)", what, name, seen)
              : fmt::format("{} changed between backward and optimizer.step() (first '{}'; a whole-run step keeps "
                            "digests only, so not by how much): clip_grad_norm_, a rescale, or code that edits "
                            "gradients", what, name));
    };
    if (!changed_digest.empty() && !late_backward) {
      // The weighted sums of .grad after DDP and at the step tell one factor on every parameter from any other
      // change (wsum_check.h), where the step kept both.
      const OneFactor fit = fit_one_factor(m, rec);
      if (!fit.known)
        changed("digests", changed_digest, 0.0, "");
      else if (fit.worst != SIZE_MAX)
        changed("edited", m.params[fit.worst].name, 0.0,
                fmt::format("; the weighted sums: '{}' is {:.3g} times farther from the factor {:.6g} the step "
                            "fits than rounding allows", m.params[fit.worst].name, fit.ratio, fit.factor));
      else if (near_one(fit.factor))
        changed("rounding", changed_digest, fit.factor, "; the weighted sums: a factor of 1 within rounding");
      else
        changed("one-factor", changed_digest, fit.factor, "; one factor on every parameter, by the weighted sums");
    }
    if (!first.empty() && !late_backward) {
      const double factor = gg > 0 ? gs / gg : 0.0;
      const bool uniform = gg > 0 && std::abs(ss - factor * factor * gg) <= 1e-6 * ss + 1e-30;
      if (uniform) factors.push_back({rec.rank, factor});
      const bool rounding = uniform && near_one(factor);
      changed(rounding ? "rounding" : uniform ? "one-factor" : "edited", first, factor, "");
    }
    for (size_t k = 0; k < rec.backwards.size(); ++k) {
      std::set<size_t> ready(rec.backwards[k].ready.begin(), rec.backwards[k].ready.end());
      for (size_t i = 0; i < m.params.size(); ++i)
        if (!ready.count(i))
          add("unused-parameters", "note", "", step, rec.rank, m.params[i].name,
              fmt::format("step {}, rank {}: '{}' got no gradient in backward {} ({}): a branch of the model the "
                          "forward did not take; DDP then {}",
                          step, rec.rank, m.params[i].name, k,
                          m.ddp.static_graph ? "static_graph=True"
                                             : m.ddp.find_unused_parameters ? "find_unused_parameters=True"
                                                                            : "find_unused_parameters=False",
                          m.ddp.static_graph ? "all-reduces zeros in its place, as static_graph learned in the "
                                               "first iteration"
                          : m.ddp.find_unused_parameters ? "all-reduces zeros in its place"
                                                         : "waits for it (find_unused_parameters=True is needed)"));
    }
    for (const auto& fwd : rec.inputs)
      for (const std::string& fp : fwd) {
        seq_[static_cast<size_t>(rec.rank)].push_back({step, fp});
        batches_[static_cast<size_t>(rec.rank)][step].push_back(fp);
      }
  }
  // Under FSDP2 a clip scales every rank's shards by one factor from the norm over all shards; ranks that scaled
  // by different factors clipped by their own shards' norm, so the model took a step no single gradient gives.
  if (m.fsdp.present && !factors.empty()) {
    std::string others;
    int first_rank = -1;
    for (const auto& [rank, factor] : factors)
      if (std::abs(factor - factors[0].second) > 1e-6 * std::abs(factors[0].second)) {
        if (first_rank < 0) first_rank = rank;
        others += fmt::format("{}rank {} by {:.6g}", others.empty() ? "" : ", ", rank, factor);
      }
    if (first_rank >= 0)
      add("grads-changed-before-step", "problem", "per-rank", step, first_rank, "",
          fmt::format("step {}: the ranks scaled their shards of .grad by different factors (rank {} by {:.6g}, {}): "
                      "under FSDP each rank holds only its shard, and one gradient scaled by one factor would be the "
                      "same on all. Usually a clip by the rank's own norm (over p.grad.to_local()); "
                      "torch.nn.utils.clip_grad_norm_(model.parameters(), ...) takes the norm over every rank's shards",
                      step, factors[0].first, factors[0].second, others));
  }
  // With broadcast_buffers=True ranks differ at the step by design (each forward updates rank 0's broadcast
  // buffers with its own batch); the finding is for broadcast_buffers=False, where they never meet again, and for a
  // sync written by hand that broadcasts nothing (one that broadcasts before its forwards is DDP's default). The
  // first buffer that differs, once a step and rank.
  const bool hand_broadcasts = m.hand && std::any_of(recs[0]->collectives.begin(), recs[0]->collectives.end(),
                                                     [](const Collective& k) { return k.op == "broadcast"; });
  for (size_t r = 1; r < recs.size() && (!m.ddp.broadcast_buffers || (m.hand && !hand_broadcasts)); ++r)
    for (const TensorInfo& b : m.buffers) {
      const auto* x = tensor(*recs[r], "buffer", b.name);
      const auto* y = tensor(*recs[0], "buffer", b.name);
      if (!x || !y || same_values(*x, *y)) continue;
      add("buffers-differ", "note", m.hand ? "hand" : "", step, static_cast<int>(r), b.name,
            m.hand ? fmt::format("step {}: rank {}'s buffer '{}' differs from rank 0's: the script's sync broadcasts "
                                 "no buffer, which is what DDP does with broadcast_buffers=False (by default DDP "
                                 "broadcasts rank 0's buffers before every forward): each rank keeps the running "
                                 "statistics of its own batches, so evaluation gives different results on different "
                                 "ranks. Broadcast them before each forward (for b in model.buffers(): "
                                 "dist.broadcast(b, src=0)), or before evaluating",
                                 step, recs[r]->rank, b.name)
                   : fmt::format("step {}: rank {}'s buffer '{}' differs from rank 0's (broadcast_buffers=False): "
                                 "each rank keeps the running statistics of its own batches, so evaluation gives "
                                 "different results on different ranks",
                                 step, recs[r]->rank, b.name));
      break;
    }
  if (recs[0]->inputs.empty()) return;
  ++steps_with_inputs_;
  bool identical = recs.size() > 1;
  for (size_t r = 1; r < recs.size(); ++r) identical = identical && recs[r]->inputs == recs[0]->inputs;
  if (identical) identical_steps_.push_back(step);
}

// Every pair of ranks: how often rank b's batch at step s + d was the very same samples as rank a's at step s, for
// each lag d (0: the same step; d > 0: the same stream of batches, one rank d draws ahead, e.g. an evaluation
// batch drawn first). Chance is measured from the run itself: how often the two ranks' batches coincide at all
// the other lags (the same pool and batch size, no shared seed), scaled to the lag's number of step pairs. A lag
// above chance by a margin no Poisson count reaches is a problem; one that chance gives less than once in
// a thousand runs (kNoteTail), below that margin, a note with the expected count. Also, for the data line, how many samples two
// ranks drew at the same step against the same chance.
namespace {

constexpr double kNoteTail = 1e-3;

// P(X >= k) for X ~ Poisson(lambda): the terms from k up, in logs (k! overflows a double past 170).
double poisson_tail(double lambda, int64_t k) {
  if (lambda <= 0) return k <= 0 ? 1.0 : 0.0;
  double sum = 0;
  for (int64_t i = k; i < k + 1000; ++i) {
    const double term = std::exp(-lambda + static_cast<double>(i) * std::log(lambda) - std::lgamma(i + 1.0));
    sum += term;
    if (static_cast<double>(i) > lambda && term < sum * 1e-12) break;
  }
  return std::min(sum, 1.0);
}

}  // namespace

// The first step at which rank b's batch at s + lag was rank a's at s (-1: none).
int64_t Findings::first_coincidence(int a, int b, int64_t lag) const {
  const auto& B = batches_[static_cast<size_t>(b)];
  for (const auto& [step, fps] : batches_[static_cast<size_t>(a)]) {
    auto it = B.find(step + lag);
    if (!fps.empty() && it != B.end() && it->second == fps) return std::max(step, step + lag);
  }
  return -1;
}

std::string Findings::same_batches(const std::string& advice, std::string* coincided) {
  const int ws = run_.world_size();
  constexpr size_t kMaxOccurrences = 64;  // of one batch or sample: past that, every pair is the same anyway
  std::map<std::string, std::vector<std::pair<int, int64_t>>> by_batch, by_sample;
  for (int r = 0; r < ws; ++r)
    for (const auto& [step, fps] : batches_[static_cast<size_t>(r)]) {
      if (fps.empty()) continue;
      std::string key;
      for (const std::string& fp : fps) key += fp + ",";
      auto& b = by_batch[key];
      if (b.size() < kMaxOccurrences) b.push_back({r, step});
      for (const std::string& fp : std::set<std::string>(fps.begin(), fps.end())) {
        auto& o = by_sample[fp];
        if (o.size() < kMaxOccurrences) o.push_back({r, step});
      }
    }
  // (a, b) -> lag -> coincidences
  const auto count_lags = [](const std::map<std::string, std::vector<std::pair<int, int64_t>>>& by) {
    std::map<std::pair<int, int>, std::map<int64_t, int64_t>> lags;
    for (const auto& [key, occ] : by)
      for (size_t x = 0; x < occ.size(); ++x)
        for (size_t y = 0; y < occ.size(); ++y)
          if (occ[x].first < occ[y].first) ++lags[{occ[x].first, occ[y].first}][occ[y].second - occ[x].second];
    return lags;
  };
  const auto batch_lags = count_lags(by_batch), sample_lags = count_lags(by_sample);
  struct Pair {
    int a, b;
    int64_t lag, same, pairs;
    double expected;
  };
  std::vector<Pair> found, above_chance;
  double same_samples = 0, expected_samples = 0;
  for (int a = 0; a < ws; ++a)
    for (int b = a + 1; b < ws; ++b) {
      const auto& A = batches_[static_cast<size_t>(a)];
      const auto& B = batches_[static_cast<size_t>(b)];
      const auto pairs_at = [&](int64_t lag) {
        int64_t n = 0;
        for (const auto& [step, fps] : A) n += !fps.empty() && B.count(step + lag) && !B.at(step + lag).empty();
        return n;
      };
      const double all_pairs = static_cast<double>(A.size()) * static_cast<double>(B.size());
      // Samples at the same step, against the rate across steps.
      if (auto it = sample_lags.find({a, b}); it != sample_lags.end()) {
        int64_t same = 0, cross = 0;
        for (const auto& [lag, n] : it->second) (lag == 0 ? same : cross) += n;
        const double common = static_cast<double>(pairs_at(0));
        same_samples += static_cast<double>(same);
        expected_samples += all_pairs > common ? static_cast<double>(cross) * common / (all_pairs - common) : 0.0;
      }
      auto it = batch_lags.find({a, b});
      if (it == batch_lags.end()) continue;
      int64_t best = 0, best_n = -1, total = 0;
      for (const auto& [lag, n] : it->second) {
        total += n;
        if (n > best_n) best = lag, best_n = n;
      }
      const int64_t n_best = pairs_at(best);
      const double p = (static_cast<double>(total - best_n) + 1) / (all_pairs - static_cast<double>(n_best) + 2);
      const double expected = p * static_cast<double>(n_best);
      if (best_n >= 2 && static_cast<double>(best_n) > expected + 4 * std::sqrt(expected) + 2)
        found.push_back({a, b, best, best_n, n_best, expected});
      else if (best_n >= 2 && poisson_tail(expected, best_n) < kNoteTail)
        above_chance.push_back({a, b, best, best_n, n_best, expected});
    }
  if (found.empty()) {
    if (!above_chance.empty()) {  // the pair whose count chance explains least
      const Pair& f = *std::min_element(above_chance.begin(), above_chance.end(), [](const Pair& x, const Pair& y) {
        return poisson_tail(x.expected, x.same) < poisson_tail(y.expected, y.same);
      });
      add("same-batches-above-chance", "note", "", first_coincidence(f.a, f.b, f.lag), f.b, "",
          fmt::format("ranks {} and {} were fed the very same batch at {} of {} steps{}, about {:.2g} expected by "
                      "chance (measured from how often their batches coincide at other steps; so many or more by "
                      "chance: p = {:.1g}): too few to call a mistake, more than independent draws give. A seed or "
                      "a shard the two ranks share at some steps does this. {}",
                      f.a, f.b, f.same, f.pairs,
                      f.lag == 0 ? "" : fmt::format(" (rank {}'s batch at step s + {} being rank {}'s at step s)",
                                                    f.lag > 0 ? f.b : f.a, std::abs(f.lag), f.lag > 0 ? f.a : f.b),
                      f.expected, poisson_tail(f.expected, f.same), advice));
    }
    *coincided = fmt::format("{:.0f} sample{} coincided between two ranks at the same step, about {:.1f} expected "
                             "from independent draws (the rate at which their samples coincide across different steps)",
                             same_samples, same_samples == 1 ? "" : "s", expected_samples);
    return "";
  }
  std::string pairs;
  for (const Pair& p : found)
    pairs += fmt::format("{}ranks {} and {}: {} of {} steps{} (about {:.2g} by chance)", pairs.empty() ? "" : "; ", p.a,
                         p.b, p.same, p.pairs,
                         p.lag == 0 ? "" : fmt::format(", rank {}'s batch at step s + {} being rank {}'s at step s",
                                                       p.lag > 0 ? p.b : p.a, std::abs(p.lag), p.lag > 0 ? p.a : p.b),
                         p.expected);
  const Pair& f = found[0];
  const int64_t first = first_coincidence(f.a, f.b, f.lag);
  const bool shifted = std::any_of(found.begin(), found.end(), [](const Pair& p) { return p.lag != 0; });
  add("same-data-on-ranks", "problem", shifted ? "shifted" : "", first, f.b, "",
      fmt::format("step {}: some ranks were fed the very same batches{}, far more often than independent draws allow "
                  "({}; chance measured from how often the two ranks' batches coincide at other steps): those ranks "
                  "train on one stream of data{}. {}",
                  first, shifted ? ", one rank some steps behind the other" : " at the same steps", pairs,
                  shifted ? " (one drew extra batches first, an evaluation say, then both drew alike)"
                          : ", and DDP averages copies of one gradient",
                  advice));
  return fmt::format("ranks were fed the same batches ({}; see same-data-on-ranks)", pairs);
}

std::string Findings::after_run(bool loaders) {
  const int ws = run_.world_size();
  // Without a DataLoader the batches were drawn by the script itself (nanoGPT's get_batch: torch.randint).
  const std::string advice =
      loaders ? sampler_advice(run_)
              : "The batches came from no DataLoader (torch.randint, say): seed each rank differently before drawing "
                "them, as nanoGPT does with seed_offset (torch.manual_seed(1337 + rank))";
  if (steps_with_inputs_ == 0) return "not checked: no input was fingerprinted (no tensor input to the DDP model)";
  if (ws > 1 && !identical_steps_.empty() && 2 * static_cast<int64_t>(identical_steps_.size()) >= steps_with_inputs_) {
    add("same-data-on-all-ranks", "problem", "", identical_steps_[0], -1, "",
        fmt::format("step {}: every rank was fed the very same samples ({} of {} recorded steps): DDP then "
                    "computes the same gradient {} times. {}",
                    identical_steps_[0], identical_steps_.size(), steps_with_inputs_, ws, advice));
    return fmt::format("every rank was fed the same samples (fingerprints of {} steps' batches; see "
                       "same-data-on-all-ranks)",
                       steps_with_inputs_);
  }
  std::string coincided;
  if (std::string pairs = same_batches(advice, &coincided); !pairs.empty()) return pairs;
  // Per rank: where it is first fed a sample it was fed before (its second epoch has begun by then).
  std::vector<size_t> repeat(static_cast<size_t>(ws));
  for (int r = 0; r < ws; ++r) {
    const auto& s = seq_[static_cast<size_t>(r)];
    std::set<std::string> seen;
    size_t p = 0;
    while (p < s.size() && seen.insert(s[p].second).second) ++p;
    repeat[static_cast<size_t>(r)] = p;
    // The second epoch begins with the first epoch's order again: set_epoch was not called (with a loader).
    if (loaders && p >= 2 && p < s.size() && run_.first().every == 1) {
      size_t k = 0;
      while (p + k < s.size() && k < p && s[p + k].second == s[k].second) ++k;
      if (k >= std::min<size_t>(p, s.size() - p) && k >= 2)
        add("same-order-every-epoch", "problem", "", s[p].first, r, "",
            fmt::format("step {}: rank {} is fed its first epoch's {} samples again in the same order: "
                        "DistributedSampler(shuffle=True) without sampler.set_epoch(epoch) at the start of each "
                        "epoch shuffles every epoch alike (with shuffle=False the repeat is what was asked for)",
                        s[p].first, r, p));
    }
  }
  // Overlap is looked for in the first half of the shortest first epoch: a second epoch (reshuffled by
  // set_epoch) may begin before a rank meets one of its own samples again, and gives other ranks' samples.
  size_t window = *std::min_element(repeat.begin(), repeat.end());
  bool repeated = false;
  for (int r = 0; r < ws; ++r) repeated = repeated || repeat[static_cast<size_t>(r)] < seq_[static_cast<size_t>(r)].size();
  if (repeated) window = (window + 1) / 2;
  std::map<std::string, std::set<int>> owners;
  std::map<std::string, int64_t> where;
  for (int r = 0; r < ws; ++r) {
    const auto& s = seq_[static_cast<size_t>(r)];
    for (size_t i = 0; i < std::min(window, s.size()); ++i) {
      owners[s[i].second].insert(r);
      if (!where.count(s[i].second)) where[s[i].second] = s[i].first;
    }
  }
  if (ws < 2) return "one rank: nothing to compare";
  int64_t shared = 0, first_step = -1;
  for (const auto& [fp, ranks] : owners)
    if (ranks.size() > 1) {
      ++shared;
      if (first_step < 0 || where[fp] < first_step) first_step = where[fp];
    }
  // DistributedSampler pads an epoch with at most world_size - 1 repeated samples.
  if (!loaders) {  // independent random draws (torch.randint) coincide now and then: no epochs, no shards
    return fmt::format("each rank drew its own batches (no DataLoader; fingerprints of {} steps' batches): {}",
                       steps_with_inputs_, coincided);
  }
  if (shared > ws - 1) {
    add("overlapping-data", "problem", "fingerprints", first_step, -1, "",
        fmt::format("{} samples were fed to more than one rank within an epoch (first at step {}): the ranks' "
                    "shards overlap. Each rank needs its own part of the data: {}",
                    shared, first_step, advice));
    return fmt::format("ranks were fed {} of the same samples (fingerprints of the batches; see overlapping-data)",
                       shared);
  }
  return fmt::format("each rank was fed its own samples: {} (fingerprints of {} steps' batches)",
                     shared == 0 ? "no sample shared between ranks" : fmt::format("{} shared (padding)", shared),
                     steps_with_inputs_);
}

}  // namespace ddplab::check
