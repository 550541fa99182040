#include "src/check/replay/wsum_check.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace ddplab::check {

double wsum_bound(int64_t n, int64_t world_size, int64_t terms, double scale, double abs_sum) {
  const auto gamma = [](double m, double u) { return m * u / (1.0 - m * u); };
  const double m = static_cast<double>(world_size + terms + 2);
  const double scaled = scale * (1.0 + std::ldexp(1.0, -23)) * abs_sum;
  return gamma(m, std::ldexp(1.0, -24)) * scaled +
         gamma(static_cast<double>(n) + 1100.0 + static_cast<double>(world_size), std::ldexp(1.0, -53)) * 4.0 * scaled +
         2.0 * static_cast<double>(n) * static_cast<double>(world_size) * std::ldexp(1.0, -149);
}

bool GradReplay::wsum_expect(const std::vector<const StepRecord*>& recs, std::vector<WsumExpect>* out,
                             std::string* why) const {
  const Manifest& m = run_.first();
  if (fsdp_) return *why = "FSDP2 keeps shards, and no weighted sums", false;
  if (hooked_ || reducers_[0]->comm_hook()) return *why = "the run's comm hook changes what is summed", false;
  for (const StepRecord* rec : recs)
    if (!rec) return *why = "a rank had joined (Join)", false;
  const StepRecord& ref = *recs[0];
  size_t syncs = 0, sync_bw = 0;
  for (size_t bw = 0; bw < ref.backwards.size(); ++bw)
    if (ref.backwards[bw].sync) ++syncs, sync_bw = bw;
  if (syncs != 1) return *why = fmt::format("step {} has {} synchronised backwards, not 1", ref.step, syncs), false;
  const ddp::Reducer& red = *reducers_[0];
  std::vector<char> bucketed(m.params.size(), 0);
  for (size_t b = 0; b < red.num_buckets(); ++b)
    for (size_t i : red.bucket(b).params) bucketed[i] = 1;
  const size_t ws = recs.size(), np = m.params.size();
  struct Acc {
    bool has = false;
    double s = 0.0, a = 0.0;
    int64_t terms = 0;
  };
  const auto at = [](const StepRecord& r, const std::string& kind, size_t i) -> const std::array<double, 3>* {
    auto it = r.wsum.find(kind);
    return it == r.wsum.end() || std::isnan(it->second[i][0]) ? nullptr : &it->second[i];
  };
  std::vector<std::vector<Acc>> acc(ws, std::vector<Acc>(np));
  std::vector<char> reached(np, 0);
  for (size_t r = 0; r < ws; ++r) {
    const StepRecord& rec = *recs[r];
    for (size_t i = 0; i < np; ++i)
      if (const auto* p = at(rec, "prior", i)) acc[r][i] = {true, (*p)[0], (*p)[1], 0};
    for (size_t bw = 0; bw <= sync_bw && bw < rec.backwards.size(); ++bw) {
      for (const StepRecord::ZeroGrad& z : rec.zero_grads) {
        if (z.before_backward != bw) continue;
        for (size_t i = 0; i < np; ++i) acc[r][i] = {!(z.set_to_none || z.none.count(i)), 0.0, 0.0, 0};
      }
      const std::string kind = "local/" + std::to_string(bw);
      for (size_t i = 0; i < np; ++i) {
        const auto* l = at(rec, kind, i);
        if (!l) continue;
        Acc& x = acc[r][i];
        x.terms += x.has;  // grad += new, or grad = new
        x.has = true, x.s += (*l)[0], x.a += (*l)[1];
      }
    }
    if (sync_bw < rec.backwards.size())
      for (size_t i : rec.backwards[sync_bw].ready) reached[i] = 1;
  }
  const double scale = red.scales_in() ? static_cast<double>(red.prepare_scale()) : 1.0 / static_cast<double>(ws);
  out->assign(np, WsumExpect{});
  for (size_t i = 0; i < np; ++i) {
    bool all = bucketed[i] && reached[i];
    double s = 0.0, a = 0.0;
    int64_t terms = 0;
    for (size_t r = 0; r < ws && all; ++r) {
      all = acc[r][i].has && std::isfinite(acc[r][i].s) && std::isfinite(acc[r][i].a);
      s += acc[r][i].s, a += acc[r][i].a, terms = std::max(terms, acc[r][i].terms);
    }
    if (!all) continue;
    (*out)[i] = {true, scale * s, wsum_bound(m.params[i].numel, static_cast<int64_t>(ws), terms, scale, a)};
  }
  return true;
}

void check_wsum(const Manifest& m, const GradReplay& replay, const std::vector<const StepRecord*>& recs,
                Findings& found, WsumCounts* counts) {
  if (recs.empty()) return;
  for (const StepRecord* rec : recs)
    if (!rec || !rec->wsum_columns || !rec->wsum.count("grad")) return;  // Join's absent ranks: said by the sample
  std::vector<GradReplay::WsumExpect> want;
  std::string why;
  if (!replay.wsum_expect(recs, &want, &why)) {
    if (counts->why.empty()) counts->why = why;
    return;
  }
  ++counts->steps;
  // Per rank, the parameter farthest outside its bound (SIZE_MAX: none).
  std::vector<size_t> worst(recs.size(), SIZE_MAX);
  for (size_t r = 0; r < recs.size(); ++r) {
    double worst_ratio = 0.0;
    for (size_t i = 0; i < m.params.size(); ++i) {
      const double got = recs[r]->wsum.at("grad")[i][0];
      if (!want[i].known || !std::isfinite(got)) continue;  // a NaN or infinity: the nonfinite finding names it
      const double diff = std::fabs(got - want[i].sum);
      const double ratio = want[i].bound > 0.0 ? diff / want[i].bound : (diff > 0.0 ? INFINITY : 0.0);
      ++counts->tensors;
      if (diff <= want[i].bound) {
        ++counts->within;
        counts->worst = std::max(counts->worst, ratio);
      } else if (worst[r] == SIZE_MAX || ratio > worst_ratio) {
        worst[r] = i, worst_ratio = ratio;
      }
    }
  }
  // The all-reduce leaves every rank the same sum: where every rank is off alike, one finding for the run's
  // ranks (this layer sees sums; it cannot tell whose contribution was wrong).
  const auto value = [&](size_t r, size_t i) { return recs[r]->wsum.at("grad")[i][0]; };
  bool alike = worst[0] != SIZE_MAX;
  for (size_t r = 1; r < recs.size(); ++r) alike = alike && worst[r] == worst[0] && value(r, worst[r]) == value(0, worst[0]);
  for (size_t r = 0; r < recs.size(); ++r) {
    const size_t i = worst[r];
    if (i == SIZE_MAX || (alike && r > 0)) continue;
    const std::string& name = m.params[i].name;
    const double got = value(r, i), diff = std::fabs(got - want[i].sum);
    const int64_t step = recs[r]->step;
    found.add("grad-not-as-predicted", "problem", "weighted-sum", step, alike ? -1 : recs[r]->rank, name,
              fmt::format("step {}: {} .grad of '{}' after DDP's all-reduce is not the ranks' local gradients summed: "
                          "its weighted sum is {:.9g}, theirs {:.9g}, {:.3g} apart where the float32 additions' rounding "
                          "allows at most {:.3g}. Its {} elements are wrong by at least {:.3g} in all (a whole-run "
                          "step: every element checked against rounding, by sums that cannot tell which rank's "
                          "contribution or which element)",
                          step, alike ? "every rank's" : fmt::format("rank {}'s", recs[r]->rank), name, got,
                          want[i].sum, diff, want[i].bound, m.params[i].numel, (diff - want[i].bound) / 2.0));
  }
}

OneFactor fit_one_factor(const Manifest& m, const StepRecord& rec) {
  OneFactor out;
  auto g = rec.wsum.find("grad"), s = rec.wsum.find("grad_step");
  if (g == rec.wsum.end() || s == rec.wsum.end()) return out;
  const auto both = [&](size_t i) {
    return std::isfinite(g->second[i][0]) && std::isfinite(s->second[i][0]) && std::isfinite(s->second[i][1]);
  };
  // The factor: the median of the parameters' own ratios, where a sum is not mostly cancellation (so that one
  // edited parameter does not move it); else a least-squares fit over all of them.
  std::vector<std::pair<double, size_t>> ratios;
  double gs = 0.0, gg = 0.0;
  for (size_t i = 0; i < m.params.size(); ++i) {
    if (!both(i)) continue;
    gs += g->second[i][0] * s->second[i][0], gg += g->second[i][0] * g->second[i][0];
    if (g->second[i][0] != 0.0 && std::fabs(s->second[i][0]) > 1e-3 * s->second[i][1])
      ratios.push_back({s->second[i][0] / g->second[i][0], i});
  }
  out.known = true;
  // Each S_step = c S_grad + e with |e| <= 2^-24 A_step (the product's rounding) + the float64 sums' rounding;
  // c taken from parameter q carries q's e / S_grad_q, which moves parameter i's residual by that times S_grad_i.
  const double u = std::ldexp(1.0, -24);
  const auto own = [&](size_t i) {
    const double a = s->second[i][1], n = static_cast<double>(m.params[i].numel);
    return 2.0 * u * a + (n + 1100.0) * std::ldexp(1.0, -53) * 8.0 * a + n * std::ldexp(1.0, -149);
  };
  size_t q = SIZE_MAX;
  if (!ratios.empty()) {
    std::nth_element(ratios.begin(), ratios.begin() + static_cast<std::ptrdiff_t>(ratios.size() / 2), ratios.end());
    out.factor = ratios[ratios.size() / 2].first, q = ratios[ratios.size() / 2].second;
  } else {
    out.factor = gg > 0.0 ? gs / gg : 0.0;
  }
  for (size_t i = 0; i < m.params.size(); ++i) {
    if (!both(i) || i == q) continue;
    double bound = 2.0 * own(i);
    if (q != SIZE_MAX) bound += 2.0 * own(q) * std::fabs(g->second[i][0] / g->second[q][0]);
    else bound += 2.0 * u * s->second[i][1];
    const double diff = std::fabs(s->second[i][0] - out.factor * g->second[i][0]);
    const double ratio = bound > 0.0 ? diff / bound : (diff > 0.0 ? INFINITY : 0.0);
    if (ratio > 1.0 && (out.worst == SIZE_MAX || ratio > out.ratio)) out.worst = i, out.ratio = ratio;
  }
  return out;
}

std::pair<double, double> wsum_norms(const StepRecord& rec) {
  const auto norm = [&](const char* kind) {
    auto it = rec.wsum.find(kind);
    if (it == rec.wsum.end()) return static_cast<double>(NAN);
    double q = 0.0;
    for (const auto& v : it->second)
      if (!std::isnan(v[0])) q += v[2];
    return std::sqrt(q);
  };
  const bool alone = rec.backwards.size() == 1 && !rec.wsum.count("prior");
  return {alone ? norm("local/0") : NAN, norm("grad")};
}

}  // namespace ddplab::check
