// check_run's passes over one DDP iteration of every rank (run_check.h), in the order check.cc runs them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <tuple>

#include <fmt/format.h>

#include "src/check/run_check.h"
#include "src/collective/allreduce.h"

namespace ddplab::check {

void RunCheck::absent_ranks() {
  // Ranks with no record of this iteration: joined (Join shadows their all-reduces with zeros), or their
  // trace ended.
  missing_ = false;
  for (int r = 0; r < ws_; ++r)
    if (!recs_[static_cast<size_t>(r)] && ref_->join) found_.join_skew();
  for (int r = 0; r < ws_; ++r) {
    if (recs_[static_cast<size_t>(r)] || ref_->join) continue;
    missing_ = true;
    const Manifest& rm = run_.ranks[static_cast<size_t>(r)];
    if (gone_.count(r) || (rm.stopped_step >= 0 && rm.stopped_step <= step_)) continue;
    gone_.insert(r);
    found_.add("uneven-steps", pairing_lost_ ? "note" : "problem", "", step_, r, "",
              fmt::format("step {}: rank {} has no record of this iteration (its trace ends at step {}{}) while rank {} "
                          "went on, and no Join was active. {}",
                          step_, r, rm.steps.empty() ? -1 : rm.steps.back(), rm.complete ? "" : "; it did not reach close()",
                          ref_->rank,
                          pairing_lost_ ? "A consequence of the unpaired all-reduce above"
                                       : "Ranks that take different numbers of steps without Join hang or pair the "
                                         "wrong all-reduces: wrap the training loop in `with Join([ddp_model]):` "
                                         "for uneven inputs, or give every rank as many batches (DistributedSampler "
                                         "does)"));
  }
}

void RunCheck::health_pass() { health_.step(recs_, previous(), found_); }

void RunCheck::sync_pass(StepLine& line) {
  // 1. DDP's synchronised backward: predicted .grad against what each rank recorded (a sync written by hand:
  // the script's own collectives and averaging replayed, and DDP's from the same local gradients beside it).
  if (m_.hand && !digests_only_) {
    std::vector<StepRecord*> mine;
    for (auto& c : cur_) mine.push_back(c.get());
    hand_.step(mine, first_, found_, &line);
  }
  if (!m_.hand) HandSync::on_top_of_ddp(recs_, found_);
  if (!pairing_lost_ && !m_.hand) {
    const std::vector<int> unsynced = unsynced_ranks(recs_);
    for (int r : unsynced)  // module(x) and a second backward are named by health.step, under this same kind
      if (!forward_bypassed_ddp(*recs_[static_cast<size_t>(r)]))
        found_.add("not-all-reduced", "problem", "no-sync", step_, r, "",
                  fmt::format("step {}, rank {}: the backward ran without DDP's all-reduce while the other ranks "
                              "all-reduced: every backward ran under no_sync() on this rank only. From here on this "
                              "rank's all-reduces pair with the other ranks' of another step, so the gradients are "
                              "not predicted",
                              step_, r));
    pairing_lost_ = !unsynced.empty();
  }
  ddp_grads(line);
}

void RunCheck::ddp_grads(StepLine& line) {
  if (replay_.grads_checked() && !pairing_lost_ && !missing_ && !digests_only_ && m_.optimizer_class != "LBFGS" &&
      !m_.hand) {
    std::string why;
    const bool predicted = replay_.predict(recs_, &why);
    for (const std::string& note : replay_.take_notes()) found_.add("buckets-not-as-predicted", "note", "", step_, -1, "", note);
    if (!predicted) found_.add("not-checked", "note", "", step_, -1, "", "gradients of step " + std::to_string(step_) + " not predicted: " + why);
    const bool synced = std::any_of(ref_->backwards.begin(), ref_->backwards.end(), [](const Backward& b) { return b.sync; });
    if (predicted && synced && replay_.unreduced_at_step()) found_.unreduced_before_step(step_);
    // Each rank's digests and comparisons side by side, then said in rank order.
    std::vector<std::vector<std::pair<bool, CmpResult>>> cmp_of(static_cast<size_t>(ws_));  // (digest same, row)
    parallel_for(&pool_, predicted ? static_cast<size_t>(ws_) : 0, 1e9, [&](size_t r) {
      if (!recs_[r]) return;
      cmp_of[r].resize(m_.params.size());
      for (size_t i = 0; i < m_.params.size(); ++i) {
        const Parameter& p = replay_.param(static_cast<int>(r), i);
        const StepRecord& mine = *cur_[r];
        const safetensors::Tensor* got = mine.find("grad", p.name);
        const auto digest = mine.crc32.find("grad/" + p.name);
        if (!got && digest != mine.crc32.end() && p.has_grad) {
          cmp_of[r][i].first = mine.digest_of(p.grad.data(), static_cast<size_t>(p.grad.size())) == digest->second;
        } else if (got && p.has_grad) {
          cmp_of[r][i].second = compare(p.name, got->data, p.grad.data());
        }
      }
    });
    for (int r = 0; r < ws_ && predicted; ++r) {
      if (!recs_[static_cast<size_t>(r)]) continue;
      std::vector<CmpResult> rows;
      for (size_t i = 0; i < m_.params.size(); ++i) {
        const Parameter& p = replay_.param(r, i);
        StepRecord& mine = *cur_[static_cast<size_t>(r)];
        const safetensors::Tensor* got = mine.find("grad", p.name);
        const auto digest = mine.crc32.find("grad/" + p.name);
        if (!got && digest != mine.crc32.end() && p.has_grad) {
          const bool same = cmp_of[static_cast<size_t>(r)][i].first;
          CmpResult c = digest_row(p.name, p.grad.size(), same);
          count(line.grads, line.rank_grads, r, c);
          if (!same) {
            found_.digest_differs("grad", step_, r, p.name, res_.order_known, mine.fold64, &res_.first_divergence);
            continue;
          }
          rows.push_back(c);
          fill_in(mine, "grad/" + p.name, p.shape, p.grad.data(), static_cast<size_t>(p.grad.size()));
          continue;
        }
        if (!got) continue;
        if (!p.has_grad) {
          found_.add("grad-not-as-predicted", "problem", "", step_, r, p.name,
                    fmt::format("step {}, rank {}: '{}' has a .grad after backward, but DDP's replay leaves it None",
                                step_, r, p.name));
          continue;
        }
        CmpResult c = std::move(cmp_of[static_cast<size_t>(r)][i].second);
        count(line.grads, line.rank_grads, r, c);
        rows.push_back(c);
      }
      found_.grads_vs_prediction(step_, r, rows, res_.order_known, &res_.first_divergence);
    }
  }

}

// ZeRO-1: whether rank `rec`'s parameter i, which its optimizer does not step, ended the step at its value before
// it while its owner's step (`owners`) moved it: no broadcast brought it. A digest-only param_after is then filled
// in with that value (the next step starts from it).
bool RunCheck::kept_its_value(StepRecord& rec, size_t i, const Matrix& owners) const {
  const std::string& name = m_.params[i].name;
  const safetensors::Tensor* before = rec.find("param_before", name);
  if (!before) return false;
  const size_t n = before->data.size(), bytes = n * sizeof(float);
  if (static_cast<size_t>(owners.size()) != n || std::memcmp(owners.data(), before->data.data(), bytes) == 0) return false;
  if (const safetensors::Tensor* got = rec.find("param_after", name))
    return got->data.size() == n && std::memcmp(got->data.data(), before->data.data(), bytes) == 0;
  const auto d = rec.crc32.find("param_after/" + name);
  if (d == rec.crc32.end() || rec.digest_of(before->data.data(), n) != d->second) return false;
  const std::vector<float> value = before->data;
  fill_in(rec, "param_after/" + name, run_.ranks[static_cast<size_t>(rec.rank)].params[i].shape, value.data(), n);
  return true;
}

void RunCheck::optimizer_pass(StepLine& line) {
  // 2. The optimizer step against torch.optim's arithmetic, and what the run as a whole did. Each rank's
  // prediction first, side by side.
  struct RankStep {
    double ln = NAN, dn = NAN;
    bool local = false, nonzero = false, moved = false, stepped = false;
    std::string unknown, opt_why;
    std::vector<Matrix> after;
    safetensors::TensorMap state_after;
  };
  std::vector<RankStep> rs(static_cast<size_t>(ws_));
  parallel_for(&pool_, static_cast<size_t>(ws_), 1e9, [&](size_t r) {
    const StepRecord* rec = recs_[r];
    if (!rec) return;
    RankStep& o = rs[r];
    if (rec->digests_only) {
      o.moved = !first_difference(run_.ranks[r], *rec, "param_before", *rec, "param_after").empty();
      std::tie(o.ln, o.dn) = wsum_norms(*rec);
      return;
    }
    const Manifest& rm = run_.ranks[r];  // its own shapes: under FSDP each rank holds its own shards
    std::tie(o.ln, o.dn) = norms(rm, *rec);
    for (const auto& [key_name, t] : rec->tensors)
      if (key_name.rfind("local/", 0) == 0) {
        o.local = true;
        o.nonzero = o.nonzero || !all_zero(t.data);
      }
    o.moved = !first_difference(rm, *rec, "param_before", *rec, "param_after").empty();
    o.unknown = modelled_optimizer_
                    ? fill_in_inputs(rm, *cur_[r], carried_step_[r] + 1 == rec->step ? &carried_[r] : nullptr)
                    : "";
    if (o.unknown.empty()) o.stepped = predict_step(rm, *rec, &o.after, &o.opt_why, &o.state_after);
  });
  // ZeRO-1: a parameter this rank does not step ends the step as its owner stepped it (the broadcast).
  std::vector<std::vector<bool>> unpredicted;
  if (zero1_.present()) {
    std::vector<std::vector<Matrix>*> after(static_cast<size_t>(ws_), nullptr);
    for (int r = 0; r < ws_; ++r) {
      const RankStep& o = rs[static_cast<size_t>(r)];
      if (recs_[static_cast<size_t>(r)] && !recs_[static_cast<size_t>(r)]->digests_only && o.unknown.empty() && o.stepped)
        after[static_cast<size_t>(r)] = &rs[static_cast<size_t>(r)].after;
    }
    unpredicted = zero1_.adopt(after);
  }
  std::vector<double> ln(static_cast<size_t>(ws_), NAN), dn(static_cast<size_t>(ws_), NAN);
  for (int r = 0; r < ws_; ++r) {
    const StepRecord* rec = recs_[static_cast<size_t>(r)];
    if (!rec) continue;
    RankStep& o = rs[static_cast<size_t>(r)];
    ln[static_cast<size_t>(r)] = o.ln, dn[static_cast<size_t>(r)] = o.dn;
    seen_.any_local = seen_.any_local || o.local;
    seen_.any_nonzero = seen_.any_nonzero || o.nonzero;
    seen_.any_moved = seen_.any_moved || o.moved;
    for (const Backward& b : rec->backwards) seen_.any_sync = seen_.any_sync || b.sync;
    if (rec->digests_only) continue;  // nothing to predict from: the ranks are compared below
    StepRecord& mine = *cur_[static_cast<size_t>(r)];
    const std::string& unknown = o.unknown;
    if (!unknown.empty()) {
      found_.add("not-checked", "note", "digest", step_, r, "",
                fmt::format("step {}, rank {}: the optimizer step is not predicted from here on: {} is known by its "
                            "digest only (it differed from the prediction, or was not predicted, at an earlier "
                            "step); the replicas are still compared by their digests. DDPTrace(..., full=True) "
                            "records the values",
                            step_, r, unknown));
      carried_step_[static_cast<size_t>(r)] = -1;
      continue;
    }
    std::vector<Matrix>& after = o.after;
    const std::string& opt_why = o.opt_why;
    safetensors::TensorMap& state_after = o.state_after;
    const bool stepped = o.stepped;
    if (!stepped) found_.add("not-checked", "note", "optimizer", step_, -1, "", "optimizer step not predicted: " + opt_why);
    std::vector<CmpResult> rows;
    std::vector<std::string> kept;  // ZeRO-1: not this rank's share, and still its value before the step
    for (size_t i = 0; i < m_.params.size() && stepped; ++i) {
      const std::string& name = m_.params[i].name;
      if (!unpredicted.empty() && unpredicted[static_cast<size_t>(r)][i]) continue;
      const safetensors::Tensor* got = mine.find("param_after", name);
      if (zero1_.present() && !run_.ranks[static_cast<size_t>(r)].steps_param(i) &&
          kept_its_value(mine, i, after[i])) {
        kept.push_back(name);
        continue;
      }
      if (!got) {  // a digest
        const bool same =
            mine.digest_of(after[i].data(), static_cast<size_t>(after[i].size())) == mine.crc32.at("param_after/" + name);
        CmpResult c = digest_row(name, after[i].size(), same);
        count(line.params, line.rank_params, r, c);
        if (same) {
          fill_in(mine, "param_after/" + name, run_.ranks[static_cast<size_t>(r)].params[i].shape, after[i].data(),
                  static_cast<size_t>(after[i].size()));
          rows.push_back(c);
        } else {
          found_.digest_differs("param", step_, r, name, res_.step_exact, mine.fold64, &res_.first_divergence);
        }
        continue;
      }
      CmpResult c = compare(name, got->data, after[i].data());
      count(line.params, line.rank_params, r, c);
      rows.push_back(c);
    }
    zero1_.not_broadcast(step_, r, kept, found_);
    if (stepped) found_.step_vs_prediction(step_, r, rows, res_.step_exact, &res_.first_divergence);
    carried_[static_cast<size_t>(r)] = std::move(state_after);
    carried_step_[static_cast<size_t>(r)] = stepped ? rec->step : -1;
  }
  res_.local_norm.push_back(ln);
  res_.ddp_norm.push_back(dn);

}

void RunCheck::replica_pass(StepLine& line) {
  // 3. The replica invariant. What replaced a rank's parameters between its previous step and this one:
  // Join's final broadcast at the end of a Join (from the rank that took the most steps, the larger rank
  // on a tie), a model averager; anything else is a change outside optimizer.step().
  std::vector<std::string> moved(static_cast<size_t>(ws_));
  bool after_averaging = false;
  for (int r = 0; r < ws_; ++r) {
    const StepRecord* rec = recs_[static_cast<size_t>(r)];
    const StepRecord* p = prev_[static_cast<size_t>(r)].get();
    if (!rec || !p || p->step + 1 != rec->step) continue;
    if (averaged_.count(p->step)) {
      after_averaging = true;
      continue;
    }
    const StepRecord* source = p;
    if (p->join && p->segment != rec->segment) {
      for (const auto& q : prev_)
        if (q && q->segment == p->segment && std::tie(q->index, q->rank) > std::tie(source->index, source->rank))
          source = q.get();
    }
    moved[static_cast<size_t>(r)] = first_difference(run_.ranks[static_cast<size_t>(r)], *rec, "param_before", *source, "param_after");
    seen_.any_moved = seen_.any_moved || !moved[static_cast<size_t>(r)].empty();  // something else trains them
  }
  if (after_averaging) {
    std::string differs;
    int who = -1;
    for (const StepRecord* rec : recs_)
      if (rec && differs.empty()) {
        differs = first_difference(m_, *rec, "param_before", *ref_, "param_before");
        who = rec->rank;
      }
    if (differs.empty()) {
      ++seen_.averagings;
      // Bit for bit the average of the ranks' parameters, added in Gloo's ring order?
      const std::vector<float> want = m_.backend == "gloo" ? predicted_average(run_, prev_, collective::Algorithm::ring)
                                                          : std::vector<float>{};
      std::vector<float> got;
      for (const TensorInfo& t : m_.params) {
        const safetensors::Tensor* v = ref_->find("param_before", t.name);
        if (!v) {  // "previous", known by its digest only: averaging changed nothing the trace can show
          got.clear();
          break;
        }
        got.insert(got.end(), v->data.begin(), v->data.end());
      }
      seen_.averagings_exact += !want.empty() && !got.empty() && want == got;
    } else {
      found_.add("replicas-diverged", "problem", "outside-step", step_, who, differs,
                fmt::format("step {}: the model averager ran after step {}, but rank {}'s '{}' differs from rank {}'s "
                            "afterwards: averaging must leave every replica equal",
                            step_, step_ - 1, who, differs, ref_->rank));
    }
  }
  if (replay_.sharded()) {  // no replicas: each rank's shards, changed only by its optimizer step
    line.replicas_equal = true;
    for (int r = 0; r < ws_; ++r)
      if (!moved[static_cast<size_t>(r)].empty()) found_.changed_outside_step(step_, r, moved[static_cast<size_t>(r)]);
  } else {
    line.replicas_equal = digests_only_               ? found_.whole_run_step(recs_, &res_.first_divergence)
                          : replay_.local_gradients() ? !after_averaging || seen_.averagings > 0
                                                     : found_.replicas(recs_, moved, first_, &res_.first_divergence);
  }
}

void RunCheck::whole_run_pass() {
  if (digests_only_ && !pairing_lost_ && !missing_ && !replay_.sharded()) {
    if (!m_.hand) {  // both replay DDP's all-reduce
      check_sample(run_, replay_, recs_, res_.step_exact, found_, &sampled_);
      check_wsum(run_.first(), replay_, recs_, found_, &wsums_);
    }
    found_.whole_run_alike(recs_, previous());
  }
}

void RunCheck::end_of_step(StepLine& line) {
  found_.per_step(recs_);
  res_.grads.checked += line.grads.checked, res_.grads.exact += line.grads.exact;
  res_.grads.allclose += line.grads.allclose, res_.grads.different += line.grads.different;
  res_.params.checked += line.params.checked, res_.params.exact += line.params.exact;
  res_.params.allclose += line.params.allclose, res_.params.different += line.params.different;
  if (!health_.outside_equal()) line.replicas_equal = false;
  res_.lines.push_back(line);
  // The next step needs only where this one left the parameters: memory stays two steps of all ranks.
  for (int r = 0; r < ws_; ++r) {
    auto& c = cur_[static_cast<size_t>(r)];
    if (!c) continue;
    for (auto it = c->tensors.begin(); it != c->tensors.end();)
      it = it->first.rfind("param_after/", 0) == 0 ? std::next(it) : c->tensors.erase(it);
    prev_[static_cast<size_t>(r)] = std::move(c);
  }
  first_ = false;
}

}  // namespace ddplab::check
