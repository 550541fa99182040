// A whole-run step (the recorder's digests-only mode after its first steps): nothing to replay, so every rank's
// digests are compared with the other ranks', stage by stage in the step's own order. At 3 ranks or more the rank
// whose digests the others do not share is named; at 2 ranks (or a tie) rank 1 against rank 0.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "src/check/findings/findings.h"

namespace ddplab::check {

namespace {

struct Stage {
  const char* kind;   // the records' kind ("state": every state/<name>/<key> digest of the parameter)
  const char* cause;  // replicas-diverged's cause
  const char* what;
  const char* usually;
};

// In the order the step meets them: the parameters it starts from, the optimizer's state, DDP's average, what the
// optimizer was given, what it left.
constexpr Stage kStages[] = {
    {"param_before", "outside-step", "parameters before optimizer.step()",
     "they changed outside optimizer.step() on this rank only since its previous step: code that edits parameters "
     "on some ranks only, or a value corrupted in memory"},
    {"state", "optimizer-state", "optimizer state before optimizer.step()",
     "the optimizer's state (momentum, Adam's moments) changed on this rank only: code that edits it, a state loaded "
     "on some ranks only, or a value corrupted in memory"},
    {"grad", "gradients", ".grad after DDP's all-reduce",
     "DDP's all-reduce did not leave the same average on every rank: a comm hook that does not all-reduce, or a "
     "value corrupted on its way"},
    {"grad_step", "gradients-changed", ".grad at optimizer.step()",
     "DDP left equal gradients on every rank, but this rank's changed before optimizer.step(): rank-dependent "
     "gradient code after backward, or a value corrupted in memory"},
    {"param_after", "optimizer", "parameters after optimizer.step()",
     "every rank stepped from equal parameters, state and gradients, but this rank's step left other values: a "
     "rank-dependent optimizer, or a value corrupted in memory"},
};

// The rank's digest of each parameter's `kind` (state: of each of its state tensors), as one comparable value.
std::vector<uint32_t> digests(const Manifest& m, const StepRecord& rec, const std::string& kind,
                              std::vector<std::string>* names) {
  std::vector<uint32_t> out;
  names->clear();
  for (const TensorInfo& p : m.params) {
    if (kind == "state") {
      const std::string prefix = "state/" + p.name + "/";
      for (auto it = rec.crc32.lower_bound(prefix); it != rec.crc32.end() && it->first.rfind(prefix, 0) == 0; ++it) {
        out.push_back(it->second);
        names->push_back(p.name);
      }
      continue;
    }
    uint32_t d = 0;
    out.push_back(rec.digest(kind, p.name, &d) ? d : 0xffffffffu);  // absent: differs from any digest but itself
    names->push_back(p.name);
  }
  return out;
}

}  // namespace

bool Findings::whole_run_step(const std::vector<const StepRecord*>& recs, Divergence* div) {
  const Manifest& m = run_.first();
  bool params_equal = true;
  std::set<int> named;  // one finding per rank and step: its first stage to differ
  for (const Stage& stage : kStages) {
    if (m.sharded && std::string(stage.kind) == "state") continue;  // ZeRO-1: each rank holds its own share's state
    std::map<std::vector<uint32_t>, std::vector<int>> by_value;  // digests -> the ranks that hold them
    std::map<int, std::vector<std::string>> names_of;
    int64_t step = -1;
    for (const StepRecord* rec : recs) {
      if (!rec) continue;
      step = rec->step;
      by_value[digests(m, *rec, stage.kind, &names_of[rec->rank])].push_back(rec->rank);
    }
    if (by_value.size() < 2) continue;
    if (std::string(stage.kind) == "param_after") params_equal = false;
    // The value most ranks hold (on a tie, the one rank 0 or the lowest rank holds) is the replicas'.
    auto common = by_value.begin();
    for (auto it = by_value.begin(); it != by_value.end(); ++it)
      if (it->second.size() > common->second.size() ||
          (it->second.size() == common->second.size() && it->second.front() < common->second.front()))
        common = it;
    for (const auto& [value, ranks] : by_value) {
      if (&value == &common->first) continue;
      for (int r : ranks) {
        if (named.count(r) || whole_run_named_.count(r)) continue;  // a rank already named: its divergence carries on
        named.insert(r);
        whole_run_named_.insert(r);
        size_t k = 0;
        while (k < value.size() && value[k] == common->first[k]) ++k;
        const std::string name = k < names_of[r].size() ? names_of[r][k] : "";
        if (div->step < 0)
          *div = {step, r, fmt::format("rank {}'s {} vs the other ranks'", r, stage.what), {},
                  "a whole-run step keeps digests only, so it says which tensor differs, not by how much"};
        add("replicas-diverged", "problem", stage.cause, step, r, name,
            fmt::format("step {}: rank {} holds other {} than the other rank{} ('{}' first{}): {}. A whole-run step "
                        "keeps digests only: which tensor, not which element nor by how much",
                        step, r, stage.what, recs.size() == 2 ? "" : "s", name,
                        recs.size() == 2 ? "; at 2 ranks rank 1 is named against rank 0" : "", stage.usually));
      }
    }
  }
  return params_equal;
}

void Findings::whole_run_alike(const std::vector<const StepRecord*>& recs, const std::vector<const StepRecord*>& prev) {
  const Manifest& m = run_.first();
  std::set<std::string> params, state;  // each rank's first change (all must agree, and every rank must have one)
  int64_t step = -1;
  size_t ranks = 0;
  for (size_t r = 0; r < recs.size(); ++r) {
    const StepRecord* rec = recs[r];
    if (!rec) continue;
    step = rec->step;
    ++ranks;
    const StepRecord* p = prev[r];
    params.insert(p && p->step + 1 == rec->step ? first_difference(m, *rec, "param_before", *p, "param_after") : "");
    state.insert(rec->state_changed.empty() ? "" : rec->state_changed.front());
  }
  if (ranks < 2) return;
  for (const Averaging& a : m.averaging)  // a model averager changed every rank's parameters: by design
    if (a.after_step == step - 1) return;
  const auto note = [&](const std::string& first, const char* cause, const char* what, const char* edits) {
    add("changed-outside-step", "note", cause, step, -1, first,
        fmt::format("step {}: {} changed since optimizer.step() of step {} left them, outside any step, alike on every "
                    "rank ('{}' first): {}, or a value corrupted alike. The replicas stay equal, so DDP is not "
                    "wrong; say so if your script did not mean it",
                    step, what, step - 1, first, edits));
  };
  // Alike: the changed tensor's digest is the same on every rank (else layer 1 named the odd rank out).
  const auto same_everywhere = [&](const std::string& kind, const std::string& name) {
    std::set<uint32_t> seen;
    for (const StepRecord* rec : recs) {
      uint32_t d = 0;
      if (rec && !rec->digest(kind, name, &d)) return false;
      if (rec) seen.insert(d);
    }
    return seen.size() == 1;
  };
  if (params.size() == 1 && !params.begin()->empty() && same_everywhere("param_before", *params.begin()))
    note(*params.begin(), "parameters", "the parameters",
         "code that edits them on every rank (a clamp under torch.no_grad(), a checkpoint loaded)");
  // state_changed names "<name>/<key>", whose digest is state/<name>/<key>.
  if (state.size() == 1 && !state.begin()->empty() && same_everywhere("state", *state.begin()))
    note(*state.begin(), "optimizer-state", "the optimizer's state",
         "code that edits it on every rank (optimizer.load_state_dict, a reset of the momentum)");
}

}  // namespace ddplab::check
