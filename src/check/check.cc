#include "src/check/check.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <iterator>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "src/check/findings.h"
#include "src/check/hand_sync.h"
#include "src/check/health.h"
#include "src/check/replay.h"
#include "src/check/sample_replay.h"
#include "src/check/step_compare.h"
#include "src/check/wsum_check.h"
#include "src/base/parallel.h"
#include "src/collective/allreduce.h"

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

CheckResult check_run(const Run& run) {
  const Manifest& m = run.first();
  const int ws = run.world_size();
  CheckResult res;
  res.world_size = ws;
  res.backend = m.backend;
  res.torch_version = m.torch_version;
  res.run_dir = run.dir;
  res.steps = run.steps;
  GradReplay replay(run);
  res.order_known = replay.exact_expected() && replay.grads_checked();
  res.order = replay.order();
  res.sharded = replay.sharded();
  Findings found(run);
  Health health(run);
  HandSync hand(run, &replay);  // m.hand: the script's own sync, replayed in place of DDP's
  run_findings(run, replay, found);
  const bool adam = m.optimizer_class == "Adam" || m.optimizer_class == "AdamW";
  const bool modelled_optimizer = adam || m.optimizer_class == "SGD";
  if (adam && !m.sqrt_exact) {
    res.step_exact = false;
    res.step_why = "this torch build's float sqrt is not IEEE's (the recorder's probe: a pip build's CPU sqrt is "
                   "MKL's VML, within 1 ulp), and " + m.optimizer_class + " divides by sqrt(exp_avg_sq): compared allclose";
  }
  std::vector<RankData> data;
  for (int r = 0; r < ws; ++r) data.push_back(read_data(run.dir, r));
  std::set<int64_t> averaged;  // steps after which a model averager ran (every rank's list: the same calls)
  for (const Averaging& a : m.averaging) averaged.insert(a.after_step);

  // The ranks' records merged by DDP iteration, (segment, index): one record per rank in memory, plus each
  // rank's previous one (its parameters after the step only).
  std::vector<size_t> next(static_cast<size_t>(ws), 0);
  std::vector<std::unique_ptr<StepRecord>> head(static_cast<size_t>(ws)), prev(static_cast<size_t>(ws));
  bool pairing_lost = false, first = true;
  RunSeen seen;
  std::vector<uint32_t> missing_first(m.missing_params.size());  // digests of rank 0's first param_before
  // Per rank, the optimizer state ddp_check predicted after its last step: what a digest of the next step's
  // state is checked against, and then stands for.
  std::vector<safetensors::TensorMap> carried(static_cast<size_t>(ws));
  std::vector<int64_t> carried_step(static_cast<size_t>(ws), -1);
  std::set<int> gone;  // ranks whose trace ended, already reported
  SampleCounts sampled;
  WsumCounts wsums;
  // The ranks' files are read, and their optimizer steps predicted, side by side (each rank's work touches only
  // its own records); what is compared and said stays in rank order.
  ThreadPool pool(std::min(available_cores(), ws));
  replay.set_pool(&pool);
  // The next records of the ranks whose record this iteration takes are read on a thread of their own while
  // it is replayed: a trace the recorder wrote past the page cache comes from the disk, and reading it
  // overlaps the arithmetic (one more step of those ranks in memory).
  auto records_to_read = [&]() {
    std::vector<std::pair<int, int64_t>> to_read;  // (rank, step)
    for (int r = 0; r < ws; ++r) {
      const auto& steps = run.ranks[static_cast<size_t>(r)].steps;
      if (!head[static_cast<size_t>(r)] && next[static_cast<size_t>(r)] < steps.size())
        to_read.push_back({r, steps[next[static_cast<size_t>(r)]++]});
    }
    return to_read;
  };
  using Read = std::vector<std::pair<int, std::unique_ptr<StepRecord>>>;
  std::future<Read> ahead;
  while (true) {
    if (ahead.valid()) {
      for (auto& [r, rec] : ahead.get()) head[static_cast<size_t>(r)] = std::move(rec);
    } else {  // the first records, side by side
      const auto to_read = records_to_read();
      parallel_for(&pool, to_read.size(), 1e9, [&](size_t k) {
        head[static_cast<size_t>(to_read[k].first)] =
            std::make_unique<StepRecord>(read_step(run, to_read[k].first, to_read[k].second));
      });
    }
    const StepRecord* lowest = nullptr;
    for (const auto& h : head)
      if (h && (!lowest || std::tie(h->segment, h->index) < std::tie(lowest->segment, lowest->index))) lowest = h.get();
    if (!lowest) break;
    const auto key = std::make_pair(lowest->segment, lowest->index);
    std::vector<std::unique_ptr<StepRecord>> cur(static_cast<size_t>(ws));
    std::vector<const StepRecord*> recs(static_cast<size_t>(ws), nullptr);
    for (int r = 0; r < ws; ++r) {
      auto& h = head[static_cast<size_t>(r)];
      if (h && std::make_pair(h->segment, h->index) == key) {
        cur[static_cast<size_t>(r)] = std::move(h);
        recs[static_cast<size_t>(r)] = cur[static_cast<size_t>(r)].get();
      }
    }
    if (auto to_read = records_to_read(); !to_read.empty())
      ahead = std::async(std::launch::async, [&run, to_read]() {
        Read got;
        for (const auto& [r, step] : to_read) got.emplace_back(r, std::make_unique<StepRecord>(read_step(run, r, step)));
        return got;
      });
    // param_before/ left out by the recorder: the rank's previous step's param_after/ (a copy: both are compared).
    for (int r = 0; r < ws; ++r) {
      StepRecord* rec = cur[static_cast<size_t>(r)].get();
      if (!rec || !rec->param_before_is_previous) continue;
      const StepRecord* p = prev[static_cast<size_t>(r)].get();
      if (!p || p->step + 1 != rec->step)
        throw TraceError(rec->path + ": its param_before is the previous step's param_after, but step " +
                         std::to_string(rec->step - 1) + " is not recorded");
      for (const TensorInfo& t : m.params) {
        uint32_t d = 0;
        if (const safetensors::Tensor* a = p->find("param_after", t.name))
          rec->tensors["param_before/" + t.name] = *a;
        else if (p->digest("param_after", t.name, &d))
          rec->crc32["param_before/" + t.name] = d;
      }
    }
    const StepRecord* ref = nullptr;
    for (const StepRecord* rec : recs) ref = ref ? ref : rec;
    const int64_t step = ref->step;
    if (first && recs[0])
      for (size_t i = 0; i < m.missing_params.size(); ++i)
        recs[0]->digest("param_before", m.params[m.missing_params[i]].name, &missing_first[i]);
    StepLine line;
    line.step = step;
    line.rank_grads.resize(static_cast<size_t>(ws));
    line.rank_params.resize(static_cast<size_t>(ws));
    for (const StepRecord* rec : recs) line.ran.push_back(rec != nullptr);

    // Ranks with no record of this iteration: joined (Join shadows their all-reduces with zeros), or their
    // trace ended.
    bool missing = false;
    for (int r = 0; r < ws; ++r)
      if (!recs[static_cast<size_t>(r)] && ref->join) found.join_skew();
    for (int r = 0; r < ws; ++r) {
      if (recs[static_cast<size_t>(r)] || ref->join) continue;
      missing = true;
      const Manifest& rm = run.ranks[static_cast<size_t>(r)];
      if (gone.count(r) || (rm.stopped_step >= 0 && rm.stopped_step <= step)) continue;
      gone.insert(r);
      found.add("uneven-steps", pairing_lost ? "note" : "problem", "", step, r, "",
                fmt::format("step {}: rank {} has no record of this iteration (its trace ends at step {}{}) while rank {} "
                            "went on, and no Join was active. {}",
                            step, r, rm.steps.empty() ? -1 : rm.steps.back(), rm.complete ? "" : "; it did not reach close()",
                            ref->rank,
                            pairing_lost ? "A consequence of the unpaired all-reduce above"
                                         : "Ranks that take different numbers of steps without Join hang or pair the "
                                           "wrong all-reduces: wrap the training loop in `with Join([ddp_model]):` "
                                           "for uneven inputs, or give every rank as many batches (DistributedSampler "
                                           "does)"));
    }
    // A whole-run step on every rank that ran it: digests only, compared across ranks (3.) instead of replayed.
    const bool digests_only =
        std::all_of(recs.begin(), recs.end(), [](const StepRecord* rec) { return !rec || rec->digests_only; });
    line.whole_run = digests_only;
    // 0. The run's health: NaN, parameters DDP does not reduce, .grad not cleared, forwards not through DDP.
    {
      std::vector<const StepRecord*> before(static_cast<size_t>(ws));
      for (int r = 0; r < ws; ++r) before[static_cast<size_t>(r)] = prev[static_cast<size_t>(r)].get();
      health.step(recs, before, found);
    }
    // 1. DDP's synchronised backward: predicted .grad against what each rank recorded (a sync written by hand:
    // the script's own collectives and averaging replayed, and DDP's from the same local gradients beside it).
    if (m.hand && !digests_only) {
      std::vector<StepRecord*> mine;
      for (auto& c : cur) mine.push_back(c.get());
      hand.step(mine, first, found, &line);
    }
    if (!pairing_lost && !m.hand) {
      const std::vector<int> unsynced = unsynced_ranks(recs);
      for (int r : unsynced)  // module(x) and a second backward are named by health.step, under this same kind
        if (!forward_bypassed_ddp(*recs[static_cast<size_t>(r)]))
          found.add("not-all-reduced", "problem", "no-sync", step, r, "",
                    fmt::format("step {}, rank {}: the backward ran without DDP's all-reduce while the other ranks "
                                "all-reduced: every backward ran under no_sync() on this rank only. From here on this "
                                "rank's all-reduces pair with the other ranks' of another step, so the gradients are "
                                "not predicted",
                                step, r));
      pairing_lost = !unsynced.empty();
    }
    if (replay.grads_checked() && !pairing_lost && !missing && !digests_only && m.optimizer_class != "LBFGS" &&
        !m.hand) {
      std::string why;
      const bool predicted = replay.predict(recs, &why);
      for (const std::string& note : replay.take_notes()) found.add("buckets-not-as-predicted", "note", "", step, -1, "", note);
      if (!predicted) found.add("not-checked", "note", "", step, -1, "", "gradients of step " + std::to_string(step) + " not predicted: " + why);
      const bool synced = std::any_of(ref->backwards.begin(), ref->backwards.end(), [](const Backward& b) { return b.sync; });
      if (predicted && synced && replay.unreduced_at_step()) found.unreduced_before_step(step);
      // Each rank's digests and comparisons side by side, then said in rank order.
      std::vector<std::vector<std::pair<bool, CmpResult>>> cmp_of(static_cast<size_t>(ws));  // (digest same, row)
      parallel_for(&pool, predicted ? static_cast<size_t>(ws) : 0, 1e9, [&](size_t r) {
        if (!recs[r]) return;
        cmp_of[r].resize(m.params.size());
        for (size_t i = 0; i < m.params.size(); ++i) {
          const Parameter& p = replay.param(static_cast<int>(r), i);
          const StepRecord& mine = *cur[r];
          const safetensors::Tensor* got = mine.find("grad", p.name);
          const auto digest = mine.crc32.find("grad/" + p.name);
          if (!got && digest != mine.crc32.end() && p.has_grad) {
            cmp_of[r][i].first = mine.digest_of(p.grad.data(), static_cast<size_t>(p.grad.size())) == digest->second;
          } else if (got && p.has_grad) {
            cmp_of[r][i].second = compare(p.name, got->data, p.grad.data());
          }
        }
      });
      for (int r = 0; r < ws && predicted; ++r) {
        if (!recs[static_cast<size_t>(r)]) continue;
        std::vector<CmpResult> rows;
        for (size_t i = 0; i < m.params.size(); ++i) {
          const Parameter& p = replay.param(r, i);
          StepRecord& mine = *cur[static_cast<size_t>(r)];
          const safetensors::Tensor* got = mine.find("grad", p.name);
          const auto digest = mine.crc32.find("grad/" + p.name);
          if (!got && digest != mine.crc32.end() && p.has_grad) {
            const bool same = cmp_of[static_cast<size_t>(r)][i].first;
            CmpResult c = digest_row(p.name, p.grad.size(), same);
            count(line.grads, line.rank_grads, r, c);
            if (!same) {
              found.digest_differs("grad", step, r, p.name, res.order_known, mine.fold64, &res.first_divergence);
              continue;
            }
            rows.push_back(c);
            fill_in(mine, "grad/" + p.name, p.shape, p.grad.data(), static_cast<size_t>(p.grad.size()));
            continue;
          }
          if (!got) continue;
          if (!p.has_grad) {
            found.add("grad-not-as-predicted", "problem", "", step, r, p.name,
                      fmt::format("step {}, rank {}: '{}' has a .grad after backward, but DDP's replay leaves it None",
                                  step, r, p.name));
            continue;
          }
          CmpResult c = std::move(cmp_of[static_cast<size_t>(r)][i].second);
          count(line.grads, line.rank_grads, r, c);
          rows.push_back(c);
        }
        found.grads_vs_prediction(step, r, rows, res.order_known, &res.first_divergence);
      }
    }

    // 2. The optimizer step against torch.optim's arithmetic, and what the run as a whole did. Each rank's
    // prediction first, side by side.
    struct RankStep {
      double ln = NAN, dn = NAN;
      bool local = false, nonzero = false, moved = false, stepped = false;
      std::string unknown, opt_why;
      std::vector<Matrix> after;
      safetensors::TensorMap state_after;
    };
    std::vector<RankStep> rs(static_cast<size_t>(ws));
    parallel_for(&pool, static_cast<size_t>(ws), 1e9, [&](size_t r) {
      const StepRecord* rec = recs[r];
      if (!rec) return;
      RankStep& o = rs[r];
      if (rec->digests_only) {
        o.moved = !first_difference(run.ranks[r], *rec, "param_before", *rec, "param_after").empty();
        std::tie(o.ln, o.dn) = wsum_norms(*rec);
        return;
      }
      const Manifest& rm = run.ranks[r];  // its own shapes: under FSDP each rank holds its own shards
      std::tie(o.ln, o.dn) = norms(rm, *rec);
      for (const auto& [key_name, t] : rec->tensors)
        if (key_name.rfind("local/", 0) == 0) {
          o.local = true;
          o.nonzero = o.nonzero || !all_zero(t.data);
        }
      o.moved = !first_difference(rm, *rec, "param_before", *rec, "param_after").empty();
      o.unknown = modelled_optimizer
                      ? fill_in_inputs(rm, *cur[r], carried_step[r] + 1 == rec->step ? &carried[r] : nullptr)
                      : "";
      if (o.unknown.empty()) o.stepped = predict_step(rm, *rec, &o.after, &o.opt_why, &o.state_after);
    });
    std::vector<double> ln(static_cast<size_t>(ws), NAN), dn(static_cast<size_t>(ws), NAN);
    for (int r = 0; r < ws; ++r) {
      const StepRecord* rec = recs[static_cast<size_t>(r)];
      if (!rec) continue;
      RankStep& o = rs[static_cast<size_t>(r)];
      ln[static_cast<size_t>(r)] = o.ln, dn[static_cast<size_t>(r)] = o.dn;
      seen.any_local = seen.any_local || o.local;
      seen.any_nonzero = seen.any_nonzero || o.nonzero;
      seen.any_moved = seen.any_moved || o.moved;
      for (const Backward& b : rec->backwards) seen.any_sync = seen.any_sync || b.sync;
      if (rec->digests_only) continue;  // nothing to predict from: the ranks are compared below
      StepRecord& mine = *cur[static_cast<size_t>(r)];
      const std::string& unknown = o.unknown;
      if (!unknown.empty()) {
        found.add("not-checked", "note", "digest", step, r, "",
                  fmt::format("step {}, rank {}: the optimizer step is not predicted from here on: {} is known by its "
                              "digest only (it differed from the prediction, or was not predicted, at an earlier "
                              "step); the replicas are still compared by their digests. DDPTrace(..., full=True) "
                              "records the values",
                              step, r, unknown));
        carried_step[static_cast<size_t>(r)] = -1;
        continue;
      }
      std::vector<Matrix>& after = o.after;
      const std::string& opt_why = o.opt_why;
      safetensors::TensorMap& state_after = o.state_after;
      const bool stepped = o.stepped;
      if (!stepped) found.add("not-checked", "note", "optimizer", step, -1, "", "optimizer step not predicted: " + opt_why);
      std::vector<CmpResult> rows;
      for (size_t i = 0; i < m.params.size() && stepped; ++i) {
        const std::string& name = m.params[i].name;
        const safetensors::Tensor* got = mine.find("param_after", name);
        if (!got) {  // a digest
          const bool same =
              mine.digest_of(after[i].data(), static_cast<size_t>(after[i].size())) == mine.crc32.at("param_after/" + name);
          CmpResult c = digest_row(name, after[i].size(), same);
          count(line.params, line.rank_params, r, c);
          if (same) {
            fill_in(mine, "param_after/" + name, run.ranks[static_cast<size_t>(r)].params[i].shape, after[i].data(),
                    static_cast<size_t>(after[i].size()));
            rows.push_back(c);
          } else {
            found.digest_differs("param", step, r, name, res.step_exact, mine.fold64, &res.first_divergence);
          }
          continue;
        }
        CmpResult c = compare(name, got->data, after[i].data());
        count(line.params, line.rank_params, r, c);
        rows.push_back(c);
      }
      if (stepped) found.step_vs_prediction(step, r, rows, res.step_exact, &res.first_divergence);
      carried[static_cast<size_t>(r)] = std::move(state_after);
      carried_step[static_cast<size_t>(r)] = stepped ? rec->step : -1;
    }
    res.local_norm.push_back(ln);
    res.ddp_norm.push_back(dn);

    // 3. The replica invariant. What replaced a rank's parameters between its previous step and this one:
    // Join's final broadcast at the end of a Join (from the rank that took the most steps, the larger rank
    // on a tie), a model averager; anything else is a change outside optimizer.step().
    std::vector<std::string> moved(static_cast<size_t>(ws));
    bool after_averaging = false;
    for (int r = 0; r < ws; ++r) {
      const StepRecord* rec = recs[static_cast<size_t>(r)];
      const StepRecord* p = prev[static_cast<size_t>(r)].get();
      if (!rec || !p || p->step + 1 != rec->step) continue;
      if (averaged.count(p->step)) {
        after_averaging = true;
        continue;
      }
      const StepRecord* source = p;
      if (p->join && p->segment != rec->segment) {
        for (const auto& q : prev)
          if (q && q->segment == p->segment && std::tie(q->index, q->rank) > std::tie(source->index, source->rank))
            source = q.get();
      }
      moved[static_cast<size_t>(r)] = first_difference(run.ranks[static_cast<size_t>(r)], *rec, "param_before", *source, "param_after");
      seen.any_moved = seen.any_moved || !moved[static_cast<size_t>(r)].empty();  // something else trains them
    }
    if (after_averaging) {
      std::string differs;
      int who = -1;
      for (const StepRecord* rec : recs)
        if (rec && differs.empty()) {
          differs = first_difference(m, *rec, "param_before", *ref, "param_before");
          who = rec->rank;
        }
      if (differs.empty()) {
        ++seen.averagings;
        // Bit for bit the average of the ranks' parameters, added in Gloo's ring order?
        const std::vector<float> want = m.backend == "gloo" ? predicted_average(run, prev, collective::Algorithm::ring)
                                                            : std::vector<float>{};
        std::vector<float> got;
        for (const TensorInfo& t : m.params) {
          const safetensors::Tensor* v = ref->find("param_before", t.name);
          if (!v) {  // "previous", known by its digest only: averaging changed nothing the trace can show
            got.clear();
            break;
          }
          got.insert(got.end(), v->data.begin(), v->data.end());
        }
        seen.averagings_exact += !want.empty() && !got.empty() && want == got;
      } else {
        found.add("replicas-diverged", "problem", "outside-step", step, who, differs,
                  fmt::format("step {}: the model averager ran after step {}, but rank {}'s '{}' differs from rank {}'s "
                              "afterwards: averaging must leave every replica equal",
                              step, step - 1, who, differs, ref->rank));
      }
    }
    if (replay.sharded()) {  // no replicas: each rank's shards, changed only by its optimizer step
      line.replicas_equal = true;
      for (int r = 0; r < ws; ++r)
        if (!moved[static_cast<size_t>(r)].empty()) found.changed_outside_step(step, r, moved[static_cast<size_t>(r)]);
    } else {
      line.replicas_equal = digests_only               ? found.whole_run_step(recs, &res.first_divergence)
                            : replay.local_gradients() ? !after_averaging || seen.averagings > 0
                                                       : found.replicas(recs, moved, first, &res.first_divergence);
    }
    if (digests_only && !pairing_lost && !missing && !replay.sharded()) {
      if (!m.hand) {  // both replay DDP's all-reduce
        check_sample(run, replay, recs, res.step_exact, found, &sampled);
        check_wsum(run.first(), replay, recs, found, &wsums);
      }
      std::vector<const StepRecord*> before(static_cast<size_t>(ws));
      for (int r = 0; r < ws; ++r) before[static_cast<size_t>(r)] = prev[static_cast<size_t>(r)].get();
      found.whole_run_alike(recs, before);
    }
    found.per_step(recs);
    res.grads.checked += line.grads.checked, res.grads.exact += line.grads.exact;
    res.grads.allclose += line.grads.allclose, res.grads.different += line.grads.different;
    res.params.checked += line.params.checked, res.params.exact += line.params.exact;
    res.params.allclose += line.params.allclose, res.params.different += line.params.different;
    if (!health.outside_equal()) line.replicas_equal = false;
    res.lines.push_back(line);
    // The next step needs only where this one left the parameters: memory stays two steps of all ranks.
    for (int r = 0; r < ws; ++r) {
      auto& c = cur[static_cast<size_t>(r)];
      if (!c) continue;
      for (auto it = c->tensors.begin(); it != c->tensors.end();)
        it = it->first.rfind("param_after/", 0) == 0 ? std::next(it) : c->tensors.erase(it);
      prev[static_cast<size_t>(r)] = std::move(c);
    }
    first = false;
  }
  if (!m.missing_params.empty() || !m.missing_unchecked.empty()) {
    std::vector<bool> changed(m.missing_params.size(), false);
    uint32_t d = 0;
    for (size_t i = 0; i < m.missing_params.size() && prev[0]; ++i)
      changed[i] = !prev[0]->digest("param_after", m.params[m.missing_params[i]].name, &d) || d != missing_first[i];
    optimizer_findings(m, changed, found);
  }
  health.after_run(found);
  seen.steps = !res.lines.empty();
  what_the_run_did(m, seen, found);
  res.buckets = replay.buckets();
  if (m.hand) res.hand = hand.result();
  res.sampled = {sampled.steps, sampled.values, sampled.exact, sampled.allclose, sampled.why};
  res.wsum = {wsums.steps, wsums.tensors, wsums.within, wsums.worst, wsums.why};
  if (!data_findings(run, data, &found, &res.data)) {
    bool loaders = false;
    for (const RankData& d : data) loaders = loaders || !d.loaders.empty();
    res.data.verdict = found.after_run(loaders);
    res.data.source = "fingerprints";
  }
  res.findings = found.take();
  return res;
}

}  // namespace ddplab::check
