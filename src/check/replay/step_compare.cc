#include "src/check/replay/step_compare.h"

#include <algorithm>
#include <cmath>

namespace ddplab::check {
namespace {

// The sum of squares in double, eight partial sums (so the compiler can vectorise it: a figure for the
// report, not a bitwise claim).
template <class T>
double sum_of_squares(const T* x, size_t n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t k = 0; k < 8; ++k) s[k] += double(x[i + k]) * double(x[i + k]);
  for (; i < n; ++i) s[0] += double(x[i]) * double(x[i]);
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

}  // namespace

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

bool all_zero(const std::vector<float>& v) {
  for (float x : v)
    if (x != 0.0f) return false;
  return true;
}

std::pair<double, double> norms(const Manifest& m, const StepRecord& rec) {
  double local = 0, ddp = 0;
  bool any_local = false, any_ddp = false;
  std::vector<double> acc;
  for (const TensorInfo& p : m.params) {
    std::vector<const safetensors::Tensor*> parts;
    for (size_t k = 0; k < rec.backwards.size(); ++k)
      if (const safetensors::Tensor* g = rec.find("local/" + std::to_string(k), p.name)) parts.push_back(g);
    if (parts.size() == 1) {  // one backward: its own gradient
      local += sum_of_squares(parts[0]->data.data(), parts[0]->data.size());
    } else if (!parts.empty()) {  // no_sync micro-steps: their sum
      acc.assign(parts[0]->data.size(), 0.0);  // FSDP: the unsharded gradient, not the rank's shard
      for (const safetensors::Tensor* g : parts)
        for (size_t i = 0; i < acc.size(); ++i) acc[i] += g->data[i];
      local += sum_of_squares(acc.data(), acc.size());
    }
    any_local = any_local || !parts.empty();
    if (const safetensors::Tensor* g = rec.find("grad", p.name)) {
      any_ddp = true;
      ddp += sum_of_squares(g->data.data(), g->data.size());
    }
  }
  return {any_local ? std::sqrt(local) : NAN, any_ddp ? std::sqrt(ddp) : NAN};
}

// What utils.average_parameters leaves on every rank (PeriodicModelAverager after a step): the parameters
// flattened in module order, `flat /= world_size` (a division), then one all-reduce of the flat buffer.
// Empty when a rank's previous record is missing or parameters are not recorded.
std::vector<float> predicted_average(const Run& run, const std::vector<std::unique_ptr<StepRecord>>& prev,
                                     collective::Algorithm algorithm) {
  const Manifest& m = run.first();
  if (!m.unchecked_params.empty()) return {};
  const auto ws = static_cast<float>(run.world_size());
  std::vector<std::vector<float>> flat(prev.size());
  for (size_t r = 0; r < prev.size(); ++r) {
    if (!prev[r]) return {};
    for (const TensorInfo& t : m.params) {
      const safetensors::Tensor* a = prev[r]->find("param_after", t.name);
      if (!a) return {};  // known by its digest only
      for (float x : a->data) flat[r].push_back(x / ws);
    }
  }
  std::vector<float*> bufs;
  for (auto& f : flat) bufs.push_back(f.data());
  collective::allreduce_sum(algorithm, bufs, flat[0].size());
  return flat[0];
}

// A prediction whose digest is the recorded one is the recorded tensor: filled in as "<kind>/<name>".
void fill_in(StepRecord& rec, const std::string& key, const std::vector<int64_t>& shape, const float* v, size_t n) {
  rec.tensors[key] = {shape, std::vector<float>(v, v + n)};
  rec.crc32.erase(key);
}

// The optimizer step's inputs a digest trace leaves out: the state before the step is the state ddp_check
// predicted after the previous one (`carried`, null when that step was not predicted) where their digests
// agree. Returns the first input still known by its digest only ("" : every input is there).
std::string fill_in_inputs(const Manifest& m, StepRecord& rec, const safetensors::TensorMap* carried) {
  std::string unknown;
  for (auto it = rec.crc32.begin(); it != rec.crc32.end();) {
    if (it->first.rfind("state/", 0) != 0) {
      ++it;
      continue;
    }
    const safetensors::Tensor* c = nullptr;
    if (carried) {
      auto f = carried->find(it->first);
      if (f != carried->end()) c = &f->second;
    }
    if (c && rec.digest_of(c->data) == it->second) {
      rec.tensors[it->first] = *c;
      it = rec.crc32.erase(it);
      continue;
    }
    if (unknown.empty()) unknown = "the optimizer state '" + it->first.substr(6) + "'";
    ++it;
  }
  for (const TensorInfo& p : m.params) {
    if (!unknown.empty()) break;
    if (!rec.find("param_before", p.name))
      unknown = "'" + p.name + "' before the step";
    else if (!rec.find("grad_step", p.name) && rec.crc32.count("grad_step/" + p.name))
      unknown = "'" + p.name + "'.grad at the step";
  }
  return unknown;
}

// One compared tensor in the step's counts, overall and for rank r.
void count(Counts& all, std::vector<Counts>& per_rank, int r, const CmpResult& c) {
  all.add(c);
  per_rank[static_cast<size_t>(r)].add(c);
}

// A row of the step's counts for a tensor compared by its digest.
CmpResult digest_row(const std::string& name, int64_t numel, bool same) {
  CmpResult c;
  c.name = name;
  c.numel = numel;
  c.exact = c.approximate = same;
  c.num_different = same ? 0 : -1;
  c.max_ulps = same ? 0 : -1;
  return c;
}

// The ranks' all-reduces pair by position: a rank that ran a backward without DDP's all-reduce while the
// others all-reduced (its forward was the wrapped module's, or ran under no_sync() on that rank only) shifts
// every later pairing. Returns the ranks that did.
bool forward_bypassed_ddp(const StepRecord& rec) {
  for (const Backward& b : rec.backwards)
    if (!b.forward.empty()) return true;
  return false;
}

std::vector<int> unsynced_ranks(const std::vector<const StepRecord*>& recs) {
  size_t nb = 0;
  for (const StepRecord* r : recs)
    if (r) nb = std::max(nb, r->backwards.size());
  std::vector<int> out;
  for (size_t k = 0; k < nb; ++k) {
    bool any_sync = false;
    for (const StepRecord* r : recs) any_sync = any_sync || (r && k < r->backwards.size() && r->backwards[k].sync);
    if (!any_sync) continue;
    for (const StepRecord* r : recs)
      if (r && (k >= r->backwards.size() || !r->backwards[k].sync)) out.push_back(r->rank);
    if (!out.empty()) break;
  }
  return out;
}

}  // namespace ddplab::check
