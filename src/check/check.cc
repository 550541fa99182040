#include "src/check/check.h"

#include <cmath>
#include <iterator>
#include <map>
#include <set>

#include <fmt/format.h>

#include "src/check/findings.h"
#include "src/check/replay.h"

namespace ddplab::check {
namespace {

// cmp(), except that a NaN where the prediction has a NaN too counts as agreeing: a run that overflowed is
// still as predicted when DDP's arithmetic gives the same NaNs (they are reported as a note, not compared away).
CmpResult compare(const std::string& name, const std::vector<float>& got, const float* want) {
  const auto n = static_cast<int64_t>(got.size());
  CmpResult r = cmp(name, got.data(), want, n);
  if (r.exact) return r;
  bool nan = false;
  for (int64_t i = 0; i < n && !nan; ++i) nan = std::isnan(got[static_cast<size_t>(i)]) && std::isnan(want[i]);
  if (!nan) return r;
  std::vector<float> a(got), b(want, want + n);
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isnan(a[i]) && std::isnan(b[i])) a[i] = b[i] = 0.0f;
  return cmp(name, a.data(), b.data(), n);
}

int64_t nonfinite(const std::vector<float>& v) {
  int64_t n = 0;
  for (float x : v) n += !std::isfinite(x);
  return n;
}

}  // namespace

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
  res.order_known = replay.exact_expected();
  res.order = replay.order();
  Findings found(run);
  const bool adam = m.optimizer_class == "Adam" || m.optimizer_class == "AdamW";
  if (adam && !m.sqrt_exact) {
    res.step_exact = false;
    res.step_why = "this torch build's float sqrt is not IEEE's (the recorder's probe: a pip build's CPU sqrt is "
                   "MKL's VML, within 1 ulp), and " + m.optimizer_class + " divides by sqrt(exp_avg_sq): compared allclose";
  }

  std::vector<StepRecord> prev;  // the previous recorded step of every rank
  for (int64_t step : run.steps) {
    std::vector<StepRecord> recs;
    for (int r = 0; r < ws; ++r) recs.push_back(read_step(run, r, step));
    StepLine line;
    line.step = step;
    line.rank_grads.resize(static_cast<size_t>(ws));
    line.rank_params.resize(static_cast<size_t>(ws));

    // 1. DDP's synchronised backward: predicted .grad against what each rank recorded.
    std::string why;
    const bool predicted = replay.predict(recs, &why);
    for (const std::string& note : replay.take_notes()) found.add("buckets-not-as-predicted", "note", "", step, -1, "", note);
    if (!predicted) found.add("not-checked", "note", "", step, -1, "", "gradients of step " + std::to_string(step) + " not predicted: " + why);
    for (int r = 0; r < ws && predicted; ++r) {
      std::vector<CmpResult> rows;
      for (size_t i = 0; i < m.params.size(); ++i) {
        const Parameter& p = replay.param(r, i);
        const safetensors::Tensor* got = recs[r].find("grad", p.name);
        if (!got) continue;
        line.nonfinite += nonfinite(got->data);
        if (!p.has_grad) {
          found.add("grad-not-as-predicted", "problem", "", step, r, p.name,
                    fmt::format("step {}, rank {}: '{}' has a .grad after backward, but DDP's replay leaves it None",
                                step, r, p.name));
          continue;
        }
        CmpResult c = compare(p.name, got->data, p.grad.data());
        line.grads.add(c);
        line.rank_grads[static_cast<size_t>(r)].add(c);
        rows.push_back(c);
      }
      found.grads_vs_prediction(step, r, rows, res.order_known, &res.first_divergence);
    }

    // 2. The replica invariant, stage by stage, and the optimizer step against torch.optim's arithmetic.
    for (int r = 0; r < ws; ++r) {
      std::vector<Matrix> after;
      std::string opt_why;
      const bool stepped = predict_step(m, recs[r], &after, &opt_why);
      if (!stepped && r == 0) found.add("not-checked", "note", "", step, -1, "", "optimizer step not predicted: " + opt_why);
      std::vector<CmpResult> rows;
      for (size_t i = 0; i < m.params.size() && stepped; ++i) {
        const std::string& name = m.params[i].name;
        CmpResult c = compare(name, recs[r].find("param_after", name)->data, after[i].data());
        line.params.add(c);
        line.rank_params[static_cast<size_t>(r)].add(c);
        rows.push_back(c);
      }
      if (stepped) found.step_vs_prediction(step, r, rows, res.step_exact, &res.first_divergence);
    }
    line.replicas_equal = found.replicas(recs, prev, &res.first_divergence);
    found.per_step(recs);
    res.grads.checked += line.grads.checked, res.grads.exact += line.grads.exact;
    res.grads.allclose += line.grads.allclose, res.grads.different += line.grads.different;
    res.params.checked += line.params.checked, res.params.exact += line.params.exact;
    res.params.allclose += line.params.allclose, res.params.different += line.params.different;
    if (line.nonfinite > 0)
      found.add("nonfinite", "note", "", step, -1, "",
                fmt::format("step {}: {} NaN/Inf values in the recorded gradients (an overflow; a NaN where DDP's "
                            "arithmetic also gives one counts as agreeing with the prediction)",
                            step, line.nonfinite));
    res.lines.push_back(line);
    // The next step needs only where this one left the parameters: memory stays one step of all ranks.
    for (StepRecord& rec : recs)
      for (auto it = rec.tensors.begin(); it != rec.tensors.end();)
        it = it->first.rfind("param_after/", 0) == 0 ? std::next(it) : rec.tensors.erase(it);
    prev = std::move(recs);
  }
  res.buckets = replay.buckets();
  found.after_run();
  res.findings = found.take();
  return res;
}

}  // namespace ddplab::check
