#include "src/check/replay/sample_replay.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

namespace ddplab::check {

std::vector<SampleSlot> sample_plan(const Manifest& m, int64_t step, size_t slots) {
  std::vector<uint64_t> starts;
  uint64_t total = 0;
  for (const TensorInfo& t : m.params) {
    starts.push_back(total);
    total += static_cast<uint64_t>(t.numel);
  }
  std::vector<SampleSlot> plan;
  if (total == 0) return plan;
  for (size_t k = 0; k < slots; ++k) {
    const auto flat = static_cast<uint64_t>(
        (static_cast<unsigned __int128>(static_cast<uint64_t>(step) * slots + k) * kSampleMultiplier) % total);
    const size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), flat) - starts.begin()) - 1;
    plan.push_back({i, static_cast<int64_t>(flat - starts[i])});
  }
  return plan;
}

bool GradReplay::predict_sample(const std::vector<const StepRecord*>& recs, const std::vector<SampleSlot>& plan,
                                std::vector<std::vector<float>>* grad, std::vector<bool>* known, std::string* why) const {
  const Manifest& m = run_.first();
  if (fsdp_) return *why = "FSDP2 keeps shards, and no sample", false;
  if (hooked_ || reducers_[0]->comm_hook()) return *why = "the run's comm hook is not replayed on a sample", false;
  if (!exact_ || !grads_checked_) return *why = "the run's addition order is not known: " + order_, false;
  if (m.ddp.gradient_as_bucket_view) return *why = "gradient_as_bucket_view=True is not replayed on a sample", false;
  const size_t ws = recs.size(), np = m.params.size(), K = plan.size();
  for (const StepRecord* rec : recs)
    if (!rec) return *why = "a rank had joined (Join)", false;
  const StepRecord& ref = *recs[0];
  // Where each parameter lies in the current layout: (bucket, offset).
  const ddp::Reducer& red = *reducers_[0];
  std::vector<std::pair<size_t, size_t>> where(np, {SIZE_MAX, 0});
  for (size_t b = 0; b < red.num_buckets(); ++b)
    for (size_t j = 0; j < red.bucket(b).params.size(); ++j) where[red.bucket(b).params[j]] = {b, red.bucket(b).offsets[j]};
  // Each rank's .grad at each slot as AccumulateGrad leaves it: the prior, then each backward's local gradient.
  std::vector<std::vector<float>> v(ws, std::vector<float>(K, 0.0f));
  std::vector<std::vector<char>> has(ws, std::vector<char>(K, 0));
  for (size_t r = 0; r < ws; ++r)
    for (size_t k = 0; k < K; ++k)
      if (recs[r]->sample.has("prior", k)) v[r][k] = recs[r]->sample.values.at("prior")[k], has[r][k] = 1;
  grad->assign(ws, std::vector<float>(K, 0.0f));
  known->assign(K, false);
  const size_t nb = ref.backwards.size();
  for (size_t bw = 0; bw < nb; ++bw) {
    const std::string kind = "local/" + std::to_string(bw);
    for (size_t r = 0; r < ws; ++r) {
      for (const StepRecord::ZeroGrad& z : recs[r]->zero_grads) {
        if (z.before_backward != bw) continue;
        for (size_t k = 0; k < K; ++k) {
          if (z.set_to_none || z.none.count(plan[k].param)) has[r][k] = 0;
          v[r][k] = 0.0f;
        }
      }
      if (!recs[r]->sample.values.count(kind)) continue;
      const std::vector<float>& local = recs[r]->sample.values.at(kind);
      for (size_t k = 0; k < K; ++k) {
        if (!recs[r]->sample.has(kind, k)) continue;
        v[r][k] = has[r][k] ? v[r][k] + local[k] : local[k];  // grad += new, or grad = new
        has[r][k] = 1;
      }
    }
    if (!ref.backwards[bw].sync) continue;
    // The synchronised backward: each slot's element of its bucket, prepared, all-reduced and finalized as
    // Reducer does it (an element's additions depend only on its index in the bucket and the bucket's size).
    for (size_t k = 0; k < K; ++k) {
      const auto [b, off] = where[plan[k].param];
      bool all = b != SIZE_MAX;
      for (size_t r = 0; r < ws; ++r) all = all && has[r][k];
      known->at(k) = all;
      if (!all) continue;
      const size_t n = red.bucket(b).numel, pos = off + static_cast<size_t>(plan[k].element);
      std::vector<float> x(ws);
      std::vector<float*> bufs(ws);
      for (size_t r = 0; r < ws; ++r) {
        x[r] = red.scales_in() ? v[r][k] * red.prepare_scale() : v[r][k];
        bufs[r] = &x[r];
      }
      const collective::MeasuredOrder* o = builtin_.measured ? builtin_.measured(n) : nullptr;
      if (o) {
        collective::chain_allreduce(*o, bufs, collective::Span{pos, pos + 1});
      } else {
        collective::allreduce_sum(algorithm_, bufs, n, collective::Span{pos, pos + 1});
      }
      for (size_t r = 0; r < ws; ++r)
        v[r][k] = (*grad)[r][k] = red.postdivides() ? x[r] / static_cast<float>(red.world_size()) : x[r];
    }
  }
  return true;
}

namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// A sampled value against its prediction: exact, allclose (only where the step is not exact by design), or not.
enum class Match { exact, allclose, differs };
Match match(float got, float want, bool allclose_ok) {
  if (same_bits(got, want) || got == want || (std::isnan(got) && std::isnan(want))) return Match::exact;  // NaN: any payload
  if (allclose_ok && std::fabs(got - want) <= 1e-8f + 1e-5f * std::fabs(want)) return Match::allclose;
  return Match::differs;
}

}  // namespace

void check_sample(const Run& run, const GradReplay& replay, const std::vector<const StepRecord*>& recs,
                  bool step_exact, Findings& found, SampleCounts* counts) {
  const Manifest& m = run.first();
  const StepRecord* ref = nullptr;
  for (const StepRecord* rec : recs) ref = ref ? ref : rec;
  if (!ref || !ref->sample.slots) return;
  for (const StepRecord* rec : recs)
    if (rec && rec->sample.slots != ref->sample.slots) {
      if (counts->why.empty()) counts->why = fmt::format("the ranks' samples differ in size at step {}", ref->step);
      return;
    }
  const int64_t step = ref->step;
  const std::vector<SampleSlot> plan = sample_plan(m, step, ref->sample.slots);
  std::vector<std::vector<float>> grad;
  std::vector<bool> known;
  std::string why;
  const bool grads = replay.predict_sample(recs, plan, &grad, &known, &why);
  if (!grads && counts->why.empty()) counts->why = why;
  ++counts->steps;
  const size_t np = m.params.size();
  std::vector<std::vector<size_t>> slots_of(np);
  for (size_t k = 0; k < plan.size(); ++k)  // a channels_last parameter is left out, as the recorder leaves it
    if (m.params[plan[k].param].strides.empty()) slots_of[plan[k].param].push_back(k);
  Manifest ms = m;  // the model as the sample sees it: each parameter its sampled elements
  for (size_t i = 0; i < np; ++i) {
    ms.params[i].shape = {static_cast<int64_t>(slots_of[i].size())};
    ms.params[i].numel = static_cast<int64_t>(slots_of[i].size());
    ms.params[i].strides.clear();
  }
  const auto tally = [&](Match x) {
    ++counts->values;
    counts->exact += x == Match::exact;
    counts->allclose += x == Match::allclose;
  };
  for (const StepRecord* rec : recs) {
    if (!rec) continue;
    const int r = rec->rank;
    const StepRecord::Sample& s = rec->sample;
    // 1. .grad after DDP's all-reduce.
    bool named = false;
    for (size_t k = 0; grads && k < plan.size(); ++k) {
      if (!known[k] || !s.has("grad", k)) continue;
      const float got = s.values.at("grad")[k], want = grad[static_cast<size_t>(r)][k];
      const Match x = match(got, want, false);
      tally(x);
      if (x == Match::exact || named) continue;
      named = true;
      const std::string& name = m.params[plan[k].param].name;
      found.add("grad-not-as-predicted", "problem", "sample", step, r, name,
                fmt::format("step {}: rank {}'s .grad of '{}' after DDP's all-reduce, element {}, is {:.9g}; the "
                            "ranks' local gradients of it, all-reduced in the run's order, give {:.9g}. A sampled "
                            "element of a whole-run step: DDP's all-reduce left a value it cannot have computed",
                            step, r, name, plan[k].element, got, want));
    }
    // 2. The optimizer step on the sample: torch.optim's arithmetic is element by element.
    const auto values = [&](const std::string& kind, size_t i, std::vector<float>* out) {
      out->clear();
      if (!s.values.count(kind)) return false;
      for (size_t k : slots_of[i]) {
        if (!s.has(kind, k)) return false;
        out->push_back(s.values.at(kind)[k]);
      }
      return true;
    };
    StepRecord rs;
    rs.path = rec->path, rs.rank = r, rs.step = step;
    rs.state_steps = rec->state_steps, rs.lr = rec->lr, rs.group_changes = rec->group_changes;
    rs.num_groups = rec->num_groups;
    bool complete = true;
    std::vector<float> got;
    for (size_t i = 0; i < np && complete; ++i) {
      const std::string& name = m.params[i].name;
      const std::vector<int64_t> shape = ms.params[i].shape;
      complete = values("param_before", i, &got) && s.values.count("param_after");
      rs.tensors["param_before/" + name] = {shape, got};
      if (values("grad_step", i, &got) && !slots_of[i].empty()) rs.tensors["grad_step/" + name] = {shape, got};
      for (const auto& [kind, vals] : s.values)
        if (kind.rfind("state/", 0) == 0 && !slots_of[i].empty() && values(kind, i, &got))
          rs.tensors["state/" + name + "/" + kind.substr(6)] = {shape, got};
    }
    std::vector<Matrix> after;
    safetensors::TensorMap state_after;
    const Manifest& mr = run.ranks[static_cast<size_t>(r)];
    if (mr.sharded) ms.param_groups = mr.param_groups, ms.owned = mr.owned, ms.sharded = true;  // this rank's share
    if (!complete || !predict_step(ms, rs, &after, &why, &state_after)) continue;
    named = false;
    const auto compare = [&](const std::string& kind, size_t i, const float* want, const char* what) {
      if (!values(kind, i, &got)) return;
      for (size_t j = 0; j < got.size(); ++j) {
        const Match x = match(got[j], want[j], !step_exact);
        tally(x);
        if (x != Match::differs || named) continue;
        named = true;
        const std::string& name = m.params[i].name;
        found.add("step-not-as-predicted", "problem", "sample", step, r, name,
                  fmt::format("step {}: rank {}'s {} of '{}' after optimizer.step(), element {}, is {:.9g}; "
                              "torch.optim's arithmetic from its sampled parameter, gradient and state before the "
                              "step gives {:.9g}. A sampled element of a whole-run step: the step (or something "
                              "inside it) wrote a value the optimizer cannot have computed",
                              step, r, what, name, plan[slots_of[i][j]].element, got[j], want[j]));
      }
    };
    for (size_t i = 0; i < np; ++i) {
      // ZeRO-1: a parameter of another rank's share ends as its owner's step (compared across ranks by digest).
      if (slots_of[i].empty() || !ms.steps_param(i)) continue;
      compare("param_after", i, after[i].data(), "value");
      const std::string prefix = "state/" + m.params[i].name + "/";
      for (const auto& [key, t] : state_after)
        if (key.rfind(prefix, 0) == 0)
          compare("state_after/" + key.substr(prefix.size()), i, t.data.data(),
                  fmt::format("optimizer state '{}'", key.substr(prefix.size())).c_str());
    }
  }
}

}  // namespace ddplab::check
