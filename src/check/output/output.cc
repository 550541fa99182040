// ddp_check's outputs: the text a learner reads and the --json document (the --report page: report_html.cc).
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "src/check/check.h"

namespace ddplab::check {
namespace {

std::string counts_text(const Counts& c, const char* what) {
  if (c.checked == 0) return fmt::format("{} not checked", what);
  return fmt::format("{} {}/{} exact{}{}", what, c.exact, c.checked,
                     c.allclose ? fmt::format(", {} allclose", c.allclose) : "",
                     c.different ? fmt::format(", {} DIFFERENT", c.different) : "");
}

std::string where(const Finding& f) {
  std::string s = f.step >= 0 ? fmt::format("step {}", f.step) : "";
  if (f.rank >= 0) s += fmt::format("{}rank {}", s.empty() ? "" : ", ", f.rank);
  if (!f.name.empty()) s += fmt::format("{}'{}'", s.empty() ? "" : ", ", f.name);
  if (f.repeats > 0) s += fmt::format("; again at {} later step{}", f.repeats, f.repeats == 1 ? "" : "s");
  return s;
}

nlohmann::json counts_json(const Counts& c) {
  return {{"checked", c.checked}, {"exact", c.exact}, {"allclose", c.allclose}, {"different", c.different}};
}

// One line per loader iteration (an epoch) of the training loaders: what each rank's sampler yielded.
std::string data_lines(const CheckResult& r) {
  std::string out;
  for (size_t i = 0; i < r.data.epochs.size();) {
    const EpochLine& e0 = r.data.epochs[i];
    std::string line = fmt::format("data loader {} epoch {}", e0.loader, e0.iteration);
    for (; i < r.data.epochs.size() && r.data.epochs[i].loader == e0.loader && r.data.epochs[i].iteration == e0.iteration; ++i) {
      const EpochLine& e = r.data.epochs[i];
      line += fmt::format(" | rank {}: {} seen, {} distinct, {} shared{}", e.rank, e.seen, e.distinct, e.shared,
                          e.order_changed < 0 ? "" : e.order_changed ? ", order changed" : ", SAME order");
    }
    out += line + "\n";
  }
  return out;
}

nlohmann::json data_json(const DataSummary& d) {
  nlohmann::json epochs = nlohmann::json::array();
  for (const EpochLine& e : d.epochs)
    epochs.push_back({{"rank", e.rank}, {"loader", e.loader}, {"epoch", e.iteration}, {"first_step", e.first_step},
                      {"seen", e.seen}, {"distinct", e.distinct}, {"shared", e.shared},
                      {"order_changed", e.order_changed < 0 ? nlohmann::json(nullptr) : nlohmann::json(e.order_changed == 1)}});
  return {{"source", d.source}, {"verdict", d.verdict}, {"epochs", epochs}};
}

std::string hand_text(const CheckResult::Hand& h) {
  std::string out = fmt::format(
      "hand-written sync: {} collectives in {} steps, {} replayed in Gloo's order, {} exact{}\n", h.collectives, h.steps,
      h.replayed, h.exact, h.why.empty() ? "" : " (some not replayed: " + h.why + ")");
  if (!h.averaging.empty()) out += "averaging: " + h.averaging + "\n";
  if (h.values)
    out += fmt::format("vs DDP: of the {} gradient values the optimizer stepped with, {} are the bits torch's DDP would "
                       "have given, {} within rounding, {} different ({})\n",
                       h.values, h.values_exact, h.values_allclose, h.values_different, counts_text(h.vs_ddp, "tensors"));
  if (!h.ddp_why.empty()) out += "vs DDP: some steps not predicted: " + h.ddp_why + "\n";
  return out;
}

nlohmann::json hand_json(const CheckResult::Hand& h) {
  return {{"steps", h.steps}, {"collectives", h.collectives}, {"replayed", h.replayed}, {"exact", h.exact},
          {"why", h.why}, {"averaging", h.averaging}, {"ddp_why", h.ddp_why},
          {"values", {{"checked", h.values}, {"exact", h.values_exact}, {"allclose", h.values_allclose},
                      {"different", h.values_different}}}};
}

}  // namespace

std::string format_text(const CheckResult& r) {
  std::string out = fmt::format("ddp_check {}: world_size {}, backend {}, torch {}, {} steps recorded\n", r.run_dir,
                                r.world_size, r.backend, r.torch_version, r.steps.size());
  if (r.hand.present)
    out += "sync: written by hand (no DistributedDataParallel): the script's own collectives are replayed, and DDP's "
           "average of the same local gradients beside it (vs DDP)\n";
  out += fmt::format("{}addition order: {}\n", r.hand.present ? "DDP's " : "", r.order);
  out += fmt::format("{}: {}\n", r.sharded ? "sharding" : "buckets (from iteration 1)", r.buckets);
  if (!r.zero1.empty()) out += "optimizer: " + r.zero1 + "\n";
  if (!r.step_exact) out += fmt::format("optimizer step: {}\n", r.step_why);
  std::set<int64_t> found_at;  // steps a finding names: their whole-run lines are printed one by one
  for (const Finding& f : r.findings) found_at.insert(f.step);
  for (size_t i = 0; i < r.lines.size(); ++i) {
    const StepLine& l = r.lines[i];
    std::string idle;  // ranks with no record of this iteration: joined (Join), or their trace ended
    for (size_t k = 0; k < l.ran.size(); ++k)
      if (!l.ran[k]) idle += fmt::format("{}{}", idle.empty() ? "" : ",", k);
    const auto quiet = [&](const StepLine& x) {
      return x.whole_run && !found_at.count(x.step) && std::all_of(x.ran.begin(), x.ran.end(), [](bool b) { return b; });
    };
    if (quiet(l)) {  // a stretch of whole-run steps where nothing new happened: one line
      size_t j = i;
      while (j + 1 < r.lines.size() && quiet(r.lines[j + 1]) && r.lines[j + 1].replicas_equal == l.replicas_equal) ++j;
      const std::string steps = fmt::format("{} step{}", j - i + 1, j > i ? "s" : "");
      // FSDP2: each rank holds its own shards, so there is nothing to compare across ranks; each rank's
      // parameters are compared with what its previous step left, and every value is flagged if not finite.
      out += fmt::format("step {:>4}{} | {} | {}\n", l.step, j > i ? fmt::format("-{}", r.lines[j].step) : "",
                         r.sharded          ? "whole run: each rank's shards as its previous step left them, every "
                                              "gradient and parameter finite (" + steps + ")"
                         : l.replicas_equal ? "whole run: every rank's digests of .grad, the step's gradients, the "
                                              "parameters" + std::string(r.zero1.empty() ? " and the optimizer state" : "") +
                                              " equal (" + steps + ")"
                                            : "whole run: digests compared across ranks (" + steps + "), as diverged above",
                         r.sharded ? "sharded" : l.replicas_equal ? "replicas equal" : "replicas DIFFER");
      i = j;
      continue;
    }
    out += fmt::format("step {:>4} | {} | {} | {}{}{}\n", l.step,
                       l.whole_run ? (r.sharded ? "whole run: each rank against its previous step"
                                                : "whole run: digests compared across ranks")
                                   : counts_text(l.grads, "grads"),
                       l.whole_run ? "no replay" : counts_text(l.params, "params"),
                       r.sharded ? "sharded" : l.replicas_equal ? "replicas equal" : "replicas DIFFER",
                       r.hand.present && l.vs_ddp.checked ? " | " + counts_text(l.vs_ddp, "vs DDP") : "",
                       idle.empty() ? "" : " | no step on rank " + idle);
  }
  out += data_lines(r);
  const auto whole = std::count_if(r.lines.begin(), r.lines.end(), [](const StepLine& l) { return l.whole_run; });
  out += fmt::format("\nsummary: {}; {}{}\n", counts_text(r.grads, "grads"), counts_text(r.params, "params"),
                     whole ? fmt::format("; whole run: {} step{} of digests compared across ranks", whole,
                                         whole == 1 ? "" : "s")
                           : "");
  if (r.sampled.steps)
    out += fmt::format("sample: {} values of {} whole-run steps replayed, {} exact{}{}\n", r.sampled.values,
                       r.sampled.steps, r.sampled.exact,
                       r.sampled.allclose ? fmt::format(", {} allclose", r.sampled.allclose) : "",
                       r.sampled.why.empty() ? "" : " (their all-reduce not replayed: " + r.sampled.why + ")");
  if (r.wsum.steps || !r.wsum.why.empty())
    out += fmt::format("all-reduce against rounding: {} of {} .grad tensors of {} whole-run steps within the bound "
                       "(the closest at {:.2g} of it){}\n",
                       r.wsum.within, r.wsum.tensors, r.wsum.steps, r.wsum.worst,
                       r.wsum.why.empty() ? "" : " (some steps not checked: " + r.wsum.why + ")");
  if (r.hand.present) out += hand_text(r.hand);
  if (!r.data.verdict.empty()) out += "data: " + r.data.verdict + "\n";
  if (r.findings.empty()) out += "findings: none\n";
  for (const Finding& f : r.findings)
    out += fmt::format("{} {}{}{}: {}\n", f.severity == "problem" ? "PROBLEM" : "note", f.kind,
                       f.cause.empty() || f.cause == "bits" ? "" : "/" + f.cause,
                       where(f).empty() ? "" : " (" + where(f) + ")", f.message);
  if (r.first_divergence.step >= 0) {
    out += fmt::format("\n# first divergence, step {}: {}\n", r.first_divergence.step, r.first_divergence.title);
    for (const CmpResult& c : r.first_divergence.rows) out += format_cmp(c) + "\n";
    if (!r.first_divergence.missing.empty()) out += "(" + r.first_divergence.missing + ")\n";
  }
  out += fmt::format("verdict: {}\n", r.problems() ? "problems" : "as-predicted");
  return out;
}

std::string format_json(const CheckResult& r) {
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& f : r.findings) {
    findings.push_back({{"kind", f.kind}, {"severity", f.severity}, {"step", f.step}, {"rank", f.rank},
                        {"name", f.name}, {"cause", f.cause}, {"message", f.message}, {"repeats", f.repeats},
                        {"repeat_steps", f.repeat_steps}});
  }
  nlohmann::json steps = nlohmann::json::array();
  for (const StepLine& l : r.lines)
    steps.push_back({{"step", l.step}, {"grads", counts_json(l.grads)}, {"params", counts_json(l.params)},
                     {"replicas_equal", l.replicas_equal}, {"ran", l.ran}, {"whole_run", l.whole_run},
                     {"vs_ddp", counts_json(l.vs_ddp)}});
  nlohmann::json j = {{"verdict", r.problems() ? "problems" : "as-predicted"},
                      {"world_size", r.world_size},
                      {"sharded", r.sharded},
                      {"zero1", r.zero1.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.zero1)},
                      {"first_divergence", r.first_divergence.step < 0
                                               ? nlohmann::json(nullptr)
                                               : nlohmann::json{{"step", r.first_divergence.step},
                                                                {"rank", r.first_divergence.rank},
                                                                {"title", r.first_divergence.title},
                                                                {"rows", r.first_divergence.rows.size()},
                                                                {"missing", r.first_divergence.missing}}},
                      {"steps", r.steps.size()},
                      {"backend", r.backend},
                      {"torch_version", r.torch_version},
                      {"order_known", r.order_known},
                      {"order", r.order},
                      {"step_exact", r.step_exact},
                      {"step_why", r.step_why},
                      {"grads", counts_json(r.grads)},
                      {"params", counts_json(r.params)},
                      {"sample", {{"steps", r.sampled.steps}, {"values", r.sampled.values},
                                  {"exact", r.sampled.exact}, {"allclose", r.sampled.allclose},
                                  {"why", r.sampled.why}}},
                      {"wsum", {{"steps", r.wsum.steps}, {"tensors", r.wsum.tensors}, {"within", r.wsum.within},
                                {"worst", r.wsum.worst}, {"why", r.wsum.why}}},
                      {"findings", findings},
                      {"sync", r.hand.present ? "hand" : "ddp"},
                      {"data", data_json(r.data)},
                      {"per_step", steps}};
  if (r.hand.present) {
    j["hand"] = hand_json(r.hand);
    j["vs_ddp"] = counts_json(r.hand.vs_ddp);  // tensors, as "grads" counts them; "hand"."values" per element
  }
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace ddplab::check
