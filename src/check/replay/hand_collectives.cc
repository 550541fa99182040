// A sync written by hand, part 1: the script's own collectives replayed from every rank's recorded input, as the
// backend computes them (Gloo: its ring over the call's own size; AVG: the sum, then / world_size; broadcast,
// all_gather, reduce_scatter: a copy, a concatenation, the all-reduce's chunk), each rank's output compared bit
// for bit.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "src/check/replay/hand_sync.h"
#include "src/collective/allreduce.h"

namespace ddplab::check {

void HandSync::on_top_of_ddp(const std::vector<const StepRecord*>& recs, Findings& found) {
  for (const StepRecord* rec : recs) {  // the first rank's first such call: once a step
    if (!rec) continue;
    const bool synced = std::any_of(rec->backwards.begin(), rec->backwards.end(), [](const Backward& b) { return b.sync; });
    for (const Collective& k : rec->collectives) {
      if (!synced || k.op != "all_reduce" || k.target != "grad" || k.in_backward || k.in_step) continue;
      found.add("hand-sync", "problem", "on-top-of-ddp", rec->step, -1, k.param,
                fmt::format("step {}: the script all-reduced the .grad of '{}' itself{}, after DDP's backward had already "
                            "averaged it: DDP all-reduces every gradient during loss.backward(), so a second average "
                            "costs a second all-reduce{}. Remove the script's own all-reduce (and its division) when "
                            "the model is wrapped in DistributedDataParallel",
                            rec->step, k.param, k.reduce_op.empty() ? "" : " (ReduceOp." + k.reduce_op + ")",
                            k.reduce_op == "SUM" ? " and, summed, multiplies the gradient by world_size unless divided "
                                                   "again"
                                                 : ""));
      return;
    }
  }
}

void HandSync::collective_errors(const Run& run, Findings& found) {
  for (const Manifest& rm : run.ranks) {
    const CollectiveError& e = rm.collective_error;
    if (e.step < 0) continue;
    const bool avg = e.reduce_op == "AVG" && rm.backend == "gloo";
    found.add("hand-sync", "problem", "collective-raised", e.step, rm.rank, e.param,
              fmt::format("step {}, rank {}: the script's {}{}{} raised, and the run ended there: {}{}", e.step, rm.rank,
                          e.op, e.reduce_op.empty() ? "" : " (ReduceOp." + e.reduce_op + ")",
                          e.param.empty() ? "" : " of '" + e.param + "'", e.error,
                          avg ? fmt::format(". torch {}'s Gloo has no ReduceOp.AVG (torch 2.x's computes it as the SUM, "
                                            "then / world_size): all_reduce with ReduceOp.SUM, then divide by "
                                            "dist.get_world_size()",
                                            rm.torch_version)
                              : ""));
  }
}

void HandSync::replay_collectives(const std::vector<StepRecord*>& recs, Findings& found, int64_t step) {
  const int ws = run_.world_size();
  const std::vector<Collective>& calls = recs[0]->collectives;
  replayed_.assign(calls.size(), {});
  for (size_t c = 0; c < calls.size(); ++c) {
    const Collective& k = calls[c];
    ++res_.collectives;
    std::string why;
    if (std::any_of(recs.begin(), recs.end(), [&](const StepRecord* r) { return !r->collectives[c].kept; }))
      why = k.dtype.empty() ? "some rank did not keep its values (a whole-run step, or a result never had)"
                            : "a " + k.dtype + " collective (float32 ones are replayed)";
    else if (k.other_group)
      why = "a collective on a subgroup";
    else if (run_.first().backend != "gloo" && ws > 2 && (k.op == "all_reduce" || k.op == "reduce_scatter"))
      why = "the order of " + run_.first().backend + "'s additions for the script's own collectives is not known";
    else if (k.op == "all_reduce" && k.reduce_op != "SUM" && k.reduce_op != "AVG" && k.reduce_op != "MIN" &&
             k.reduce_op != "MAX")
      why = "ReduceOp." + k.reduce_op;
    if (!why.empty()) {
      if (res_.why.empty()) res_.why = why;
      continue;
    }
    const size_t n = static_cast<size_t>(k.numel);
    std::vector<std::vector<float>> out(static_cast<size_t>(ws));
    if (k.op == "broadcast") {
      for (auto& o : out) o = recs[static_cast<size_t>(k.src)]->collectives[c].in;
    } else if (k.op == "all_gather") {
      for (auto& o : out)
        for (const StepRecord* r : recs) o.insert(o.end(), r->collectives[c].in.begin(), r->collectives[c].in.end());
    } else if (k.reduce_op == "MIN" || k.reduce_op == "MAX") {
      out[0] = recs[0]->collectives[c].in;
      for (const StepRecord* r : recs)
        for (size_t e = 0; e < n; ++e)
          out[0][e] = k.reduce_op == "MIN" ? std::min(out[0][e], r->collectives[c].in[e])
                                           : std::max(out[0][e], r->collectives[c].in[e]);
      for (auto& o : out) o = out[0];
    } else {  // SUM or AVG: Gloo's ring over the call's own size (reduce_scatter: over the whole input, then a chunk)
      std::vector<float*> bufs;
      for (int r = 0; r < ws; ++r) {
        out[static_cast<size_t>(r)] = recs[static_cast<size_t>(r)]->collectives[c].in;
        bufs.push_back(out[static_cast<size_t>(r)].data());
      }
      if (ws > 1) collective::allreduce_sum(collective::Algorithm::ring, bufs, n);
      if (k.reduce_op == "AVG")
        for (auto& o : out)
          for (float& v : o) v /= static_cast<float>(ws);
      if (k.op == "reduce_scatter")
        for (int r = 0; r < ws; ++r) {
          const size_t chunk = n / static_cast<size_t>(ws);
          auto& o = out[static_cast<size_t>(r)];
          o = std::vector<float>(o.begin() + static_cast<std::ptrdiff_t>(chunk * r),
                                 o.begin() + static_cast<std::ptrdiff_t>(chunk * (r + 1)));
        }
    }
    ++res_.replayed;
    bool exact = true;
    for (int r = 0; r < ws; ++r) {
      const Collective& got = recs[static_cast<size_t>(r)]->collectives[c];
      const auto& want = out[static_cast<size_t>(r)];
      if (got.out.size() == want.size() && std::memcmp(got.out.data(), want.data(), want.size() * sizeof(float)) == 0)
        continue;
      exact = false;
      found.add("hand-sync", "problem", "collective-not-as-predicted", step, r, got.param,
                fmt::format("step {}, rank {}: the script's {} #{} ({} {} values{}) returned other values than {} "
                            "computes from the ranks' inputs: something changed the tensor while the collective ran, "
                            "or the ranks did not pair the same calls",
                            step, r, k.op, c, k.reduce_op.empty() ? "" : k.reduce_op, k.numel,
                            got.param.empty() ? "" : " of '" + got.param + "'", run_.first().backend));
    }
    res_.exact += exact;
    replayed_[c] = std::move(out);
  }
}

}  // namespace ddplab::check
