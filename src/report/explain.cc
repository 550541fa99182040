#include "src/report/explain.h"

#include <cstring>

#include <fmt/format.h>

#include "src/collective/allreduce.h"
#include "src/collective/half.h"
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

namespace {

// What each order is, in a sentence or two (the algorithm files' own comments, for a learner).
std::string describe(collective::Algorithm a) {
  switch (a) {
    case collective::Algorithm::naive:
      return "the rank-order sum ((x0 + x1) + x2) + ..., the notebook's hand-written average; no backend adds so";
    case collective::Algorithm::ring:
      return "Gloo's ring (ProcessGroupGloo's all-reduce of CPU tensors): the buffer is cut into one chunk per rank\n"
             "(in segments Gloo sizes from the byte count); in the reduce-scatter each chunk's partial sum travels\n"
             "down the ring (rank r sends to rank r - 1), every rank adding its own value to what it received; the\n"
             "all-gather then copies each finished chunk around";
    case collective::Algorithm::nccl_ring:
      return "NCCL's ring as it runs pinned (--nccl-exact: NCCL_ALGO=Ring NCCL_PROTO=Simple, one channel): the\n"
             "buffer is walked in loops of world_size chunks of 2 MiB (a shorter last loop is cut into world_size\n"
             "16-byte-aligned pieces); chunk c's sum starts at ring position c + 1 and travels up the ring (p -> p + 1),\n"
             "every position adding its own value, position c last; the all-gather then copies it around. It runs\n"
             "the other way round from Gloo's ring. Unpinned, NCCL picks its algorithm, protocol and channels itself";
    case collective::Algorithm::tree:
      return "a binary tree: rank i adds its children's subtree sums to its own value, left child (2i + 1) first,\n"
             "and rank 0 broadcasts the result";
    case collective::Algorithm::halving_doubling:
      return "recursive halving and doubling: ranks beyond the largest power of two P first fold into rank r - P;\n"
             "then the P ranks halve their range with partners at distance P/2, P/4, ..., adding pairwise, and\n"
             "double it back";
  }
  return "";
}

std::string title(collective::Algorithm a) {
  switch (a) {
    case collective::Algorithm::naive: return "the rank-order sum";
    case collective::Algorithm::ring: return "Gloo's ring all-reduce";
    case collective::Algorithm::nccl_ring: return "NCCL's ring all-reduce (pinned)";
    case collective::Algorithm::tree: return "the tree all-reduce";
    case collective::Algorithm::halving_doubling: return "the halving-doubling all-reduce";
  }
  return "";
}

std::vector<float> run(collective::Algorithm a, const std::vector<std::vector<float>>& inputs) {
  std::vector<std::vector<float>> bufs = inputs;
  std::vector<float*> ptrs;
  for (auto& b : bufs) ptrs.push_back(b.data());
  collective::allreduce_sum(a, ptrs, inputs[0].size(), collective::Span{0, inputs[0].size()});
  return bufs[0];
}

std::string ulps_text(int64_t u) { return u == 0 ? std::string("bitwise equal") : fmt::format("{} ulp apart", u); }

}  // namespace

std::vector<OrderRange> addition_order(collective::Algorithm a, size_t n, size_t world_size) {
  const auto bufs = collective::allreduce_symbols(a, world_size, n);
  std::vector<OrderRange> out;
  for (size_t i = 0; i < n; ++i) {
    std::string sum = collective::sym_text(bufs[0][i]);
    if (!out.empty() && out.back().sum == sum) {
      out.back().end = i + 1;
    } else {
      out.push_back({i, i + 1, std::move(sum)});
    }
  }
  return out;
}

std::string explain_ring(const std::string& name, const std::vector<std::vector<float>>& inputs) {
  return explain_allreduce(collective::Algorithm::ring, name, inputs);
}

std::string explain_allreduce(collective::Algorithm a, const std::string& name,
                              const std::vector<std::vector<float>>& inputs) {
  const size_t N = inputs.size(), n = inputs[0].size();
  std::string out;
  out += fmt::format("# --explain: {} of {} ({} floats) over {} ranks\n", title(a), name, n, N);
  out += describe(a) + ".\n";
  if (a == collective::Algorithm::ring) {  // every message, as Gloo sends them
    const RingTrace t = trace_ring(inputs);
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
  } else {
    for (size_t r = 0; r < N; ++r) out += fmt::format("  input rank{}: {}\n", r, values(inputs[r].data(), 0, n));
  }
  out += "who adds what (the algorithm's own code run on symbols: x_r is rank r's value, left operand first):\n";
  for (const OrderRange& g : addition_order(a, n, N))
    out += fmt::format("  elements [{},{}): {}\n", g.begin, g.end, g.sum);

  const std::vector<float> mine = run(a, inputs), rank_order = run(collective::Algorithm::naive, inputs);
  out += "result vs the rank-order sum ((x0 + x1) + x2 ...):\n";
  int64_t first = -1;
  for (size_t i = 0; i < n; ++i) {
    const int64_t u = ulp_distance(mine[i], rank_order[i]);
    if (u != 0 && first < 0) first = static_cast<int64_t>(i);
    out += fmt::format("  [{}] {} {:.9g}  rank-order {:.9g}  {}\n", i, collective::algorithm_name(a), mine[i],
                       rank_order[i], ulps_text(u));
  }
  if (first < 0) {
    out += "every element is bitwise equal to the rank-order sum: with these values the order rounded the same way.\n";
  } else {
    const size_t i = static_cast<size_t>(first);
    out += fmt::format(
        "first difference at element {}: {} ulp ({:.3g} relative). Same numbers, summed in another order: float\n"
        "addition rounds after every step, so (a + b) + c and a + (b + c) can differ in the last bit. That is\n"
        "'exact: False, approximate: True'.\n",
        i, ulp_distance(mine[i], rank_order[i]),
        std::abs(mine[i] - rank_order[i]) / std::max(std::abs(rank_order[i]), 1e-30f));
  }

  // Every order on the same values: on the first element where they do not all agree.
  std::vector<std::vector<float>> results;
  for (size_t k = 0; k < collective::algorithm_names().size(); ++k)
    results.push_back(run(static_cast<collective::Algorithm>(k), inputs));
  size_t at = 0;
  bool disagree = false;
  for (size_t i = 0; i < n && !disagree; ++i)
    for (const auto& r : results)
      if (float_bits(r[i]) != float_bits(results[0][i])) at = i, disagree = true;
  out += fmt::format("every order of the simulator (--allreduce) on element {} ({}):\n", at,
                     disagree ? "the first where they do not all agree" : "they agree on every element");
  for (size_t k = 0; k < results.size(); ++k) {
    const auto alg = static_cast<collective::Algorithm>(k);
    std::string sum;
    for (const OrderRange& g : addition_order(alg, n, N))
      if (g.begin <= at && at < g.end) sum = g.sum;
    out += fmt::format("  {:<16} {:<40} {:.9g}  {}{}\n", collective::algorithm_name(alg), sum, results[k][at],
                       ulps_text(ulp_distance(results[k][at], rank_order[at])),
                       alg == a ? "  <- this run" : "");
  }
  out += N < 3 ? "With 2 ranks every order is x0 + x1 or x1 + x0, the same bits (addition commutes): orders differ from\n"
                 "3 ranks on.\n"
               : "Each order adds the same values in another grouping, and each addition rounds: groupings that differ\n"
                 "can round differently in the last bit. ddplab predicts a backend bit for bit only in the order that\n"
                 "backend really adds in (Gloo: ring; NCCL pinned by --nccl-exact: nccl-ring).\n";
  return out;
}

}  // namespace ddplab
