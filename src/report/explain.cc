#include "src/report/explain.h"

#include <cstring>

#include <fmt/format.h>

#include "src/collective/allreduce.h"
#include "src/collective/ring.h"

namespace ddplab {

namespace {

std::string values(const float* v, size_t begin, size_t end) {
  std::string s;
  for (size_t i = begin; i < end; ++i) s += fmt::format("{}{:.9g}", i > begin ? " " : "", v[i]);
  return "[" + s + "]";
}

}  // namespace

RingTrace trace_ring(const std::vector<std::vector<float>>& inputs) {
  const size_t N = inputs.size(), n = inputs[0].size();
  RingTrace t;
  t.inputs = inputs;
  const collective::RingLayout L = collective::gloo_ring_layout(n, N);
  t.num_segments = L.num_segments, t.segment_elems = L.segment_elems, t.segments_per_rank = L.segments_per_rank;
  t.chunk_begin = L.chunk_begin;
  t.chunk_end = L.chunk_end;
  std::vector<std::vector<float>> bufs = inputs;
  std::vector<float*> ptrs;
  for (auto& b : bufs) ptrs.push_back(b.data());
  collective::ring_allreduce_observed(ptrs, n, {0, n}, [&](const collective::RingMessage& m) {
    const size_t b = L.chunk_begin[m.chunk], e = L.chunk_end[m.chunk];
    if (b == e) return;  // empty chunk: nothing travels
    t.steps.push_back({m.reduce_scatter, m.step, m.from, m.to, m.chunk, b, e,
                       std::vector<float>(bufs[m.to].begin() + static_cast<std::ptrdiff_t>(b),
                                          bufs[m.to].begin() + static_cast<std::ptrdiff_t>(e))});
  });
  std::vector<std::vector<float>> naive = inputs;
  std::vector<float*> nptrs;
  for (auto& b : naive) nptrs.push_back(b.data());
  collective::naive_allreduce(nptrs, n, {0, n});
  t.ring = bufs[0];
  t.rank_order = naive[0];
  for (size_t i = 0; i < n; ++i) t.ulps.push_back(ulp_distance(t.ring[i], t.rank_order[i]));
  return t;
}

std::string explain_ring(const std::string& name, const std::vector<std::vector<float>>& inputs) {
  const RingTrace t = trace_ring(inputs);
  const size_t N = inputs.size(), n = inputs[0].size();
  std::string out;
  out += fmt::format("# --explain: Gloo's ring all-reduce of {} ({} floats) over {} ranks\n", name, n, N);
  out += fmt::format("chunks: {} segments of {} floats, {} per rank ->", t.num_segments, t.segment_elems,
                     t.segments_per_rank);
  for (size_t k = 0; k < N; ++k) out += fmt::format(" rank{} owns [{},{})", k, t.chunk_begin[k], t.chunk_end[k]);
  out += "\n";
  for (size_t r = 0; r < N; ++r) out += fmt::format("  input rank{}: {}\n", r, values(inputs[r].data(), 0, n));
  for (const RingStep& m : t.steps) {
    out += fmt::format("  {} step {}: rank{} -> rank{} chunk {} [{},{}) {} rank{} now holds {}\n",
                       m.reduce_scatter ? "reduce-scatter" : "all-gather", m.step, m.from, m.to, m.chunk, m.begin,
                       m.end, m.reduce_scatter ? "added:" : "copied:", m.to, values(m.held.data(), 0, m.held.size()));
  }
  out += "ring result vs the rank-order sum ((x0 + x1) + x2 ...):\n";
  int64_t first = -1;
  for (size_t i = 0; i < n; ++i) {
    if (t.ulps[i] != 0 && first < 0) first = static_cast<int64_t>(i);
    out += fmt::format("  [{}] ring {:.9g}  rank-order {:.9g}  {}\n", i, t.ring[i], t.rank_order[i],
                       t.ulps[i] == 0 ? std::string("bitwise equal") : fmt::format("{} ulp apart", t.ulps[i]));
  }
  if (first < 0) {
    out += "every element is bitwise equal: with these values the different addition order rounded the same way.\n";
  } else {
    const size_t i = static_cast<size_t>(first);
    out += fmt::format(
        "first difference at element {}: {} ulp ({:.3g} relative). Same numbers, summed in another order: float\n"
        "addition rounds after every step, so (a + b) + c and a + (b + c) can differ in the last bit. That is\n"
        "'exact: False, approximate: True'.\n",
        i, t.ulps[i], std::abs(t.ring[i] - t.rank_order[i]) / std::max(std::abs(t.rank_order[i]), 1e-30f));
  }
  return out;
}

}  // namespace ddplab
