// A sync written by hand, part 2: the step's checks in order, and the gradient each rank stepped with explained
// from its local gradients (hand_sync.h); the collectives' replay is hand_collectives.cc.
#include "src/check/replay/hand_sync.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "src/base/compare.h"
#include "src/check/replay/step_compare.h"

namespace ddplab::check {
namespace {

// What a script does to a gradient before or after its all-reduce, each computed as torch computes it in float32.
struct Transform {
  const char* label;  // "" : nothing
  double factor;      // relative to the values it is given
  int kind;           // 0 as is, 1 x / ws, 2 x * (1 / ws), 3 x / 2, 4 x * 2, 5 (x / ws) / ws
};

std::vector<Transform> transforms(int ws) {
  const double w = ws;
  std::vector<Transform> t = {{"", 1.0, 0}, {"/ world_size", 1.0 / w, 1}, {"* (1 / world_size)", 1.0 / w, 2}};
  if (ws != 2) t.push_back({"/ 2", 0.5, 3});  // a world size of 2 written into the code
  t.push_back({"x 2", 2.0, 4});
  t.push_back({"/ world_size twice", 1.0 / (w * w), 5});
  return t;
}

float apply(const Transform& t, float x, int ws) {
  const float w = static_cast<float>(ws);
  switch (t.kind) {
    case 1: return x / w;
    case 2: return x * (1.0f / w);
    case 3: return x / 2.0f;
    case 4: return x * 2.0f;
    case 5: return (x / w) / w;
    default: return x;
  }
}

// Which transform maps `x` to `y` bit for bit (the first that does), or -1.
int which(const std::vector<Transform>& ts, const float* x, const float* y, size_t n, int ws) {
  for (size_t k = 0; k < ts.size(); ++k) {
    bool ok = true;
    for (size_t e = 0; e < n && ok; ++e) {
      const float v = apply(ts[k], x[e], ws);
      ok = std::memcmp(&v, &y[e], sizeof(float)) == 0;
    }
    if (ok) return static_cast<int>(k);
  }
  return -1;
}

// The rank's gradient as AccumulateGrad leaves it after the step's backwards: the prior .grad, then each
// backward's local gradient added in turn (a zero_grad between two backwards clears it). Empty: none.
std::vector<float> accumulated(const StepRecord& rec, const std::string& name) {
  std::vector<float> acc;
  bool have = false;
  if (const safetensors::Tensor* p = rec.find("prior", name)) acc = p->data, have = true;
  for (size_t k = 0; k < rec.backwards.size(); ++k) {
    for (const StepRecord::ZeroGrad& z : rec.zero_grads)
      if (z.before_backward == k && have) {
        if (z.set_to_none) acc.clear(), have = false;
        else std::fill(acc.begin(), acc.end(), 0.0f);
      }
    const safetensors::Tensor* l = rec.find("local/" + std::to_string(k), name);
    if (!l) continue;
    if (!have) {
      acc = l->data, have = true;
    } else {
      for (size_t e = 0; e < acc.size() && e < l->data.size(); ++e) acc[e] += l->data[e];
    }
  }
  return acc;
}

// The step's last backward's local gradient, where the step has more than one backward (micro-batches). Empty:
// none, or a single backward.
std::vector<float> last_local(const StepRecord& rec, const std::string& name) {
  if (rec.backwards.size() < 2) return {};
  const safetensors::Tensor* l = rec.find("local/" + std::to_string(rec.backwards.size() - 1), name);
  return l ? l->data : std::vector<float>();
}

// Where a parameter's gradient went in one rank's collectives: collective index, offset in it, the transform
// applied before; found by its own name (a .grad handed over) or by its values (a flat buffer, a bucket). last:
// what was handed over is the last micro-batch's gradient, not the accumulated one.
struct Carrier {
  size_t c = 0, offset = 0;
  int pre = -1;
  bool last = false;
};

}  // namespace

void HandSync::step(const std::vector<StepRecord*>& recs, bool first_step, Findings& found, StepLine* line) {
  const int ws = run_.world_size();
  const StepRecord* ref = nullptr;
  for (const StepRecord* r : recs) ref = ref ? ref : r;
  if (!ref) return;
  const int64_t step = ref->step;
  if (std::any_of(recs.begin(), recs.end(), [](const StepRecord* r) { return !r || r->digests_only; })) return;
  ++res_.steps;
  // The ranks must have called the same collectives, in the same order: else they paired the wrong ones.
  for (const StepRecord* r : recs) {
    bool same = r->collectives.size() == ref->collectives.size();
    for (size_t c = 0; same && c < r->collectives.size(); ++c) {
      const Collective &a = r->collectives[c], &b = ref->collectives[c];
      same = a.op == b.op && a.reduce_op == b.reduce_op && a.numel == b.numel;
    }
    if (!same) {
      found.add("hand-sync", "problem", "collectives-differ", step, r->rank, "",
                fmt::format("step {}: rank {} called {} collectives, rank {} {}, not the same calls in the same "
                            "order: each call pairs with the other ranks' call of the same position, so every rank must "
                            "issue the same collectives (same op, size, order) every step",
                            step, r->rank, r->collectives.size(), ref->rank, ref->collectives.size()));
      return;
    }
  }
  if (first_step && ws > 1) {
    for (const StepRecord* r : recs) {
      const std::string d = first_difference(run_.first(), *r, "param_before", *ref, "param_before");
      if (d.empty()) continue;
      found.add("hand-sync", "problem", "no-broadcast", step, r->rank, d,
                fmt::format("step {}: rank {}'s '{}' differs from rank {}'s before the first step: the replicas start "
                            "from different weights (each rank initialised its own). Broadcast rank 0's at construction, "
                            "as DDP does: for p in model.parameters(): dist.broadcast(p.data, src=0)",
                            step, r->rank, d, ref->rank));
      break;
    }
  }
  replay_collectives(recs, found, step);
  explain(recs, found, line);
  vs_ddp(recs, line);
}

void HandSync::explain(const std::vector<StepRecord*>& recs, Findings& found, StepLine* line) {
  const Manifest& m = run_.first();
  const int ws = run_.world_size();
  const int64_t step = recs[0]->step;
  const std::vector<Transform> ts = transforms(ws);
  const std::vector<Collective>& calls = recs[0]->collectives;
  synced_at_.resize(m.params.size(), -1);
  // Rank 0's accumulated gradients, and where each went: by name, else found by value in a buffer's input.
  std::vector<std::vector<float>> acc0(m.params.size()), last0(m.params.size());
  for (size_t i = 0; i < m.params.size(); ++i) {
    acc0[i] = accumulated(*recs[0], m.params[i].name);
    last0[i] = last_local(*recs[0], m.params[i].name);
  }
  std::vector<std::vector<Carrier>> carriers(m.params.size());
  std::set<size_t> buffers_used;
  for (size_t c = 0; c < calls.size(); ++c) {
    const Collective& k = calls[c];
    if (k.op != "all_reduce" || !k.kept) continue;
    if (!k.param.empty()) {
      for (size_t i = 0; i < m.params.size(); ++i)
        if (m.params[i].name == k.param) carriers[i].push_back({c, 0, -1});
      continue;
    }
    // A flat buffer: parameters laid end to end, each found at the next offset by its (transformed) values.
    const std::vector<float>& x = k.in;
    size_t off = 0;
    while (off < x.size()) {
      bool found_one = false;
      for (size_t i = 0; i < m.params.size() && !found_one; ++i) {
        const size_t n = acc0[i].size();
        if (n == 0 || off + n > x.size()) continue;
        int t = which(ts, acc0[i].data(), x.data() + off, n, ws);
        const bool last = t < 0 && last0[i].size() == n && (t = which(ts, last0[i].data(), x.data() + off, n, ws)) >= 0;
        if (t < 0) continue;
        carriers[i].push_back({c, off, t, last});
        buffers_used.insert(c);
        off += n, found_one = true;
      }
      if (!found_one) break;
    }
  }
  // An async call the step did not wait for: what the step read is a race, explained by no arithmetic.
  const auto unwaited = [](const Collective& k) {
    return k.async && !k.in_step &&
           (k.waited == "completed-unwaited" || k.waited == "running-at-step" || !k.done_before_step);
  };
  bool raced = false;
  for (const StepRecord* rec : recs) raced = raced || std::any_of(rec->collectives.begin(), rec->collectives.end(), unwaited);
  // Each parameter on each rank: pre(acc) is what it handed over; post(result) what it stepped with.
  std::map<std::string, int64_t> styles;  // "<pre>|<op>|<post>" -> parameters
  std::string first_name;
  // This step's mistakes, once each (cause -> name, message, every parameter it holds for).
  struct Mistake {
    std::string name, message;
    std::vector<std::string> names;
  };
  std::map<std::string, Mistake> mistakes;
  const auto mistake = [&](const std::string& cause, const std::string& name, const std::string& message) {
    Mistake& x = mistakes[cause];
    if (x.message.empty()) x.name = name, x.message = message;
    if (std::find(x.names.begin(), x.names.end(), name) == x.names.end()) x.names.push_back(name);
  };
  for (size_t i = 0; i < m.params.size(); ++i) {
    const std::string& name = m.params[i].name;
    for (StepRecord* rec : recs) {
      const int r = rec->rank;
      const safetensors::Tensor* g = rec->find("grad_step", name);
      const std::vector<float> acc = accumulated(*rec, name);
      if (!g || acc.empty() || acc.size() != g->data.size()) continue;
      const size_t n = acc.size();
      CmpResult row;
      if (carriers[i].empty()) {  // never all-reduced: the optimizer stepped with the rank's own gradient?
        row = compare(name, g->data, acc.data());
        count(line->grads, line->rank_grads, r, row);
        if (ws > 1 && row.exact && synced_at_[i] >= 0)
          mistake("sync-stopped", name,
                  fmt::format("step {}: '{}' was all-reduced at step {} but not at this one: every rank stepped with its "
                              "own local gradient, so the replicas drift apart from here. The sync keeps state from "
                              "step to step that was not reset after the step (a bucket's ready count, a list of "
                              "handles, a flag): reset it in finish_gradient_synchronization() or before each backward",
                              step, name, synced_at_[i]));
        else if (ws > 1 && row.exact)
          mistake("not-synchronised", name,
                  fmt::format("step {}: '{}' was never all-reduced: every rank stepped with its own local gradient, "
                              "so the replicas drift apart from this step on. Synchronise every parameter that has a "
                              "gradient (loop over model.parameters(), not a hand-picked list)",
                              step, name));
        continue;
      }
      synced_at_[i] = step;
      const Carrier& cr = carriers[i].back();  // the last call that carried it is what the step read
      const Collective& k = rec->collectives[cr.c];
      if (!k.kept || k.in.size() < cr.offset + n) continue;
      int pre = which(ts, acc.data(), k.in.data() + cr.offset, n, ws);
      const std::vector<float> last = pre < 0 ? last_local(*rec, name) : std::vector<float>();
      const bool last_only = pre < 0 && last.size() == n && (pre = which(ts, last.data(), k.in.data() + cr.offset, n, ws)) >= 0;
      const std::vector<float>* result =
          replayed_[cr.c].empty() ? &k.out : &replayed_[cr.c][static_cast<size_t>(r)];
      if (result->size() < cr.offset + n) continue;
      const int post = which(ts, result->data() + cr.offset, g->data.data(), n, ws);
      std::vector<float> want(n);
      for (size_t e = 0; e < n; ++e) want[e] = apply(ts[post < 0 ? 0 : post], (*result)[cr.offset + e], ws);
      row = compare(name, g->data, want.data());
      if (pre < 0) row.exact = false;  // what it handed over is not its gradient by any arithmetic modelled
      count(line->grads, line->rank_grads, r, row);
      if (k.target == "param" || raced) continue;  // named below
      if (pre < 0 || post < 0) {
        found.add("hand-sync", "note", "not-explained", step, r, name,
                  fmt::format("step {}, rank {}: what '{}' {} is not its gradient by any arithmetic ddp_check models "
                              "(as is, / world_size, * (1 / world_size), / 2, x 2, / world_size twice)",
                              step, r, name, pre < 0 ? "handed to its all-reduce" : "stepped with after its all-reduce"));
        continue;
      }
      if (last_only)
        mistake("last-micro-batch-only", name,
                fmt::format("step {}: '{}' was averaged from the last micro-batch's gradient only (the last of {} "
                            "backwards): the earlier micro-batches' gradients were dropped before the all-reduce (a "
                            "buffer filled by a hook at each backward, or .grad overwritten, instead of accumulated). "
                            "All-reduce the accumulated .grad once, after the step's last backward",
                            step, name, rec->backwards.size()));
      const double sum = k.reduce_op == "AVG" ? 1.0 : k.reduce_op == "SUM" ? ws : 0.0;
      const double total = ts[static_cast<size_t>(pre)].factor * sum * ts[static_cast<size_t>(post)].factor;
      if (r == 0) {
        ++styles[fmt::format("{}|{}|{}", ts[static_cast<size_t>(pre)].label, k.reduce_op, ts[static_cast<size_t>(post)].label)];
        if (first_name.empty()) first_name = name;
      }
      if (ws == 1 || std::abs(total - 1.0) < 1e-9) continue;
      const std::string ratio = fmt::format("{:g}", total);
      if (ts[static_cast<size_t>(pre)].kind == 4) {
        mistake("doubled-by-hook", name,
                  fmt::format("step {}: each rank handed its all-reduce twice its local gradient of '{}': a hook that "
                              "sets p.grad before accumulation (AccumulateGrad then adds the gradient into it) doubles "
                              "every gradient; the optimizer stepped with {}x the average. A tensor hook must not set "
                              ".grad: return the new gradient, or use register_post_accumulate_grad_hook",
                              step, name, ratio));
      } else if (std::abs(total - ws) < 1e-9) {
        mistake("never-divided", name,
                  fmt::format("step {}: '{}' was summed over the {} ranks and never divided: the optimizer stepped with "
                              "{}x the average gradient (the replicas stay equal, so a ranks-equal test passes). Divide "
                              "after the SUM: p.grad /= dist.get_world_size()",
                              step, name, ws, ratio));
      } else if (std::abs(total - 1.0 / ws) < 1e-9 || ts[static_cast<size_t>(post)].kind == 5) {
        mistake("divided-twice", name,
                  fmt::format("step {}: '{}' was divided by world_size twice: the optimizer stepped with {}x the average "
                              "gradient. Divide once: either before the all-reduce or after it, not both",
                              step, name, ratio));
      } else if (ts[static_cast<size_t>(pre)].kind == 3 || ts[static_cast<size_t>(post)].kind == 3) {
        mistake("hardcoded-world-size", name,
                  fmt::format("step {}: '{}' was divided by 2 at world size {}: a world size written into the code; the "
                              "optimizer stepped with {}x the average. Divide by dist.get_world_size()",
                              step, name, ws, ratio));
      } else {
        mistake("wrong-factor", name,
                  fmt::format("step {}: the optimizer stepped with {}x the average gradient of '{}'", step, ratio, name));
      }
    }
  }
  // Calls on the parameters themselves during the backward: a hook handed the parameter reduced it, not its .grad.
  for (const Collective& k : calls)
    if (k.target == "param" && k.op == "all_reduce" && !k.in_step)
      mistake("parameter-reduced", k.param,
                fmt::format("step {}: the script all-reduced the parameter '{}' itself, not its gradient: the weights "
                            "are summed across ranks and .grad stays each rank's own. In a post-accumulate-grad hook, "
                            "reduce param.grad (the hook is handed the parameter)",
                            step, k.param));
  for (const auto& [cause, x] : mistakes)
    found.add("hand-sync", "problem", cause, step, -1, x.name,
              x.names.size() > 1 ? fmt::format("{} (also {} more: {})", x.message, x.names.size() - 1,
                                               fmt::join(x.names.begin() + 1, x.names.end(), ", "))
                                 : x.message);
  // Async calls whose result the step did not wait for: the first of each rank's.
  for (StepRecord* rec : recs)
    for (const Collective& k : rec->collectives)
      if (unwaited(k)) {
        found.add("hand-sync", "problem", "not-waited", rec->step, rec->rank, k.param,
                  fmt::format("step {}, rank {}: the async {} of {} was not waited before optimizer.step() ({}): the "
                              "step may read the gradient before the all-reduce wrote it. Call work.wait() on every "
                              "handle before step()",
                              rec->step, rec->rank, k.op, k.param.empty() ? "a buffer" : "'" + k.param + "'",
                              k.waited == "completed-unwaited" ? "it had finished by chance" : "it was still running"));
        break;
      }
  if (res_.averaging.empty() && !styles.empty()) {
    const auto best = std::max_element(styles.begin(), styles.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    const std::string pre = best->first.substr(0, best->first.find('|'));
    const std::string rest = best->first.substr(best->first.find('|') + 1);
    const std::string op = rest.substr(0, rest.find('|')), post = rest.substr(rest.find('|') + 1);
    const size_t per_param = std::count_if(calls.begin(), calls.end(), [](const Collective& k) {
      return k.op == "all_reduce" && !k.param.empty();
    });
    std::string layout = buffers_used.empty() ? fmt::format("per parameter ({} all-reduces a step)", per_param)
                         : buffers_used.size() == 1 ? std::string("in one flat buffer")
                                                    : fmt::format("in {} buffers (buckets)", buffers_used.size());
    res_.averaging = fmt::format("{}{}{}, {}", pre.empty() ? "" : pre + " then ", op,
                                 post.empty() ? "" : " then " + post, layout);
  }
}

void HandSync::vs_ddp(const std::vector<StepRecord*>& recs, StepLine* line) {
  const Manifest& m = run_.first();
  // As DDP would: every backward's gradients accumulated, the step's last backward all-reduced.
  std::vector<std::vector<bool>> saved;
  std::vector<const StepRecord*> view;
  for (StepRecord* rec : recs) {
    saved.emplace_back();
    for (size_t k = 0; k < rec->backwards.size(); ++k) {
      saved.back().push_back(rec->backwards[k].sync);
      rec->backwards[k].sync = k + 1 == rec->backwards.size();
    }
    view.push_back(rec);
  }
  std::string why;
  const bool predicted = ddp_->predict(view, &why);
  for (size_t r = 0; r < recs.size(); ++r)
    for (size_t k = 0; k < saved[r].size(); ++k) recs[r]->backwards[k].sync = saved[r][k];
  if (!predicted) {
    if (res_.ddp_why.empty()) res_.ddp_why = why;
    return;
  }
  for (size_t r = 0; r < recs.size(); ++r)
    for (size_t i = 0; i < m.params.size(); ++i) {
      const Parameter& p = ddp_->param(static_cast<int>(r), i);
      const safetensors::Tensor* g = recs[r]->find("grad_step", p.name);
      if (!g || !p.has_grad || static_cast<int64_t>(g->data.size()) != p.grad.size()) continue;
      const CmpResult c = compare(p.name, g->data, p.grad.data());
      line->vs_ddp.add(c);
      res_.vs_ddp.add(c);
      for (size_t e = 0; e < g->data.size(); ++e) {
        const float a = g->data[e], b = p.grad.data()[e];
        ++res_.values;
        if (std::memcmp(&a, &b, sizeof(float)) == 0) ++res_.values_exact;
        else if (std::abs(a - b) <= 1e-8f + 1e-5f * std::abs(b)) ++res_.values_allclose;
        else ++res_.values_different;
      }
    }
}

}  // namespace ddplab::check
