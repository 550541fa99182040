#include "src/report/gpt_output.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/base/compare.h"
#include "src/base/io.h"

namespace ddplab::report {

namespace {

std::string json_list(const std::vector<float>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + json_float(v[i]);
  return s + "]";
}

std::string json_state_dict(const RankRecord& r) {
  std::vector<std::string> items;
  for (size_t i = 0; i < r.names.size(); ++i) items.push_back(json_string(r.names[i]) + ": " + json_list(r.params[i]));
  return "{" + fmt::format("{}", fmt::join(items, ", ")) + "}";
}

}  // namespace

std::string short_names(std::string text) {
  const std::string prefix = "transformer.";
  for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at))
    text.erase(at, prefix.size());
  return text;
}

RankRecord record_of(const gpt::GptRank& rank) {
  RankRecord r;
  for (const Parameter* p : rank.params) {
    r.names.push_back(p->name);
    r.params.emplace_back(p->data(), p->data() + p->numel());
  }
  r.log = rank.log;
  r.log.clip_norms = rank.clip_norms;  // the training loop's clip_grad_norm_ results
  return r;
}

std::string gpt_summary(const gpt::RunConfig& cfg, const std::vector<RankRecord>& ranks) {
  std::string out;
  const size_t micro = static_cast<size_t>(cfg.no_sync);
  size_t n = 0;  // under --uneven the ranks ran different numbers of steps
  for (const RankRecord& r : ranks) n = std::max(n, r.log.losses.size());
  for (size_t i = 0; i < n; ++i) {
    std::string line = fmt::format("step {:3d}", i / micro);
    if (micro > 1) line += fmt::format(" micro {}", i % micro);
    for (size_t r = 0; r < ranks.size(); ++r) {
      const auto& l = ranks[r].log.losses;
      line += i < l.size() ? fmt::format(" | rank{} loss {:.6f}", r, l[i]) : fmt::format(" | rank{} joined", r);
    }
    const size_t step = i / micro;
    if (i % micro == micro - 1 && step < ranks[0].log.clip_norms.size()) {
      bool same = true;  // the averaged gradients are equal, so is every rank's norm
      for (const RankRecord& r : ranks) {
        same = same && (step >= r.log.clip_norms.size() || r.log.clip_norms[step] == ranks[0].log.clip_norms[step]);
      }
      line += fmt::format(" | clip_grad_norm_ total {}{}", python_float_repr(ranks[0].log.clip_norms[step]),
                          same ? " on every rank" : " on rank 0, OTHER RANKS DIFFER");
    }
    out += line + "\n";
  }
  for (size_t e = 0; ranks.size() && e < ranks[0].log.evals.size(); ++e) {
    std::string line = fmt::format("eval at step {}", ranks[0].log.evals[e].step);
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (e >= ranks[r].log.evals.size()) continue;
      line +=
          fmt::format(" | rank{} train {:.4f} val {:.4f}", r, ranks[r].log.evals[e].train, ranks[r].log.evals[e].val);
    }
    out += line + "\n";
  }
  // The notebook's cmp table: the last rank's parameters against rank 0's in full, the others in one line.
  for (size_t k = 1; k < ranks.size(); ++k) {
    std::string rows;
    int64_t exact = 0;
    for (size_t i = 0; i < ranks[0].params.size(); ++i) {
      const auto& a = ranks[k].params[i];
      const CmpResult c = cmp(ranks[0].names[i], a.data(), ranks[0].params[i].data(), static_cast<int64_t>(a.size()));
      exact += c.exact ? 1 : 0;
      rows += format_cmp(c) + "\n";
    }
    out += fmt::format("\nrank {} vs rank 0: {} of {} parameters exactly equal\n", k, exact, ranks[0].params.size());
    if (k + 1 == ranks.size()) out += rows;
  }
  return out;
}

std::string gpt_dump_json(const gpt::RunConfig& cfg, const std::vector<RankRecord>& ranks, const std::string& backend,
                          const std::string& error) {
  std::string s = fmt::format("{{\"world_size\": {}", cfg.world_size);
  if (!backend.empty()) s += fmt::format(", \"backend\": {}", json_string(backend));
  std::vector<std::string> args;
  for (const std::string& a : ddp::to_args(cfg)) args.push_back(json_string(a));
  s += fmt::format(", \"args\": [{}]", fmt::join(args, ", "));
  std::vector<std::string> reps, losses, evals, norms;
  for (const RankRecord& r : ranks) {
    reps.push_back(json_state_dict(r));
    losses.push_back(json_list(r.log.losses));
    std::vector<std::string> ev;
    for (const gpt::EvalLog& e : r.log.evals) {
      ev.push_back(fmt::format("[{}, {}, {}]", e.step, json_float(e.train), json_float(e.val)));
    }
    evals.push_back("[" + fmt::format("{}", fmt::join(ev, ", ")) + "]");
    norms.push_back(json_list(r.log.clip_norms));
  }
  s += fmt::format(",\n \"replicas\": [{}]", fmt::join(reps, ",\n  "));
  s += fmt::format(",\n \"losses\": [{}]", fmt::join(losses, ", "));
  s += fmt::format(",\n \"evals\": [{}]", fmt::join(evals, ", "));
  s += fmt::format(",\n \"clip_norms\": [{}]", fmt::join(norms, ", "));
  if (!error.empty()) s += fmt::format(",\n \"error\": {}", json_string(error));
  return s + "}\n";
}

std::string gpt_sim_vs_real(const gpt::RunConfig& cfg, const std::vector<RankRecord>& real,
                            const std::vector<RankRecord>& sim, const std::string& error, const std::string& sim_error,
                            bool* ok) {
  std::string out;
  *ok = true;
  for (size_t r = 0; r < real.size(); ++r) {
    const RankRecord& s = sim[r];
    const bool show = r == 0 || r + 1 == real.size();
    if (show) out += fmt::format("\n# sim vs real, rank {} (simulator all-reduce: ring, the order of Gloo's ring)\n", r);
    for (size_t i = 0; i < s.names.size(); ++i) {
      const CmpResult c =
          cmp(s.names[i], s.params[i].data(), real[r].params[i].data(), static_cast<int64_t>(s.params[i].size()));
      *ok = *ok && c.approximate;
      if (show) out += format_cmp(c) + "\n";
    }
    const bool same_losses = s.log.losses == real[r].log.losses && s.log.clip_norms == real[r].log.clip_norms;
    if (show) {
      out += fmt::format("losses{}: {}\n", cfg.clip_grad_norm > 0 ? " and clip norms" : "",
                         same_losses ? "bitwise equal" : "DIFFERENT");
    }
    *ok = *ok && same_losses;
    if (r > 0) {
      bool equal = true;
      for (size_t i = 0; i < s.names.size(); ++i) equal = equal && real[r].params[i] == real[0].params[i];
      *ok = *ok && equal;
      if (r + 1 == real.size()) {
        out += fmt::format("real rank {} vs real rank 0: {}\n", r, equal ? "every parameter bitwise equal" : "DIFFERENT");
      }
    }
  }
  if (!error.empty()) {
    out += fmt::format("\nthe ranks stopped where torch 1.13 raises; the simulator {}\n",
                       sim_error == error ? "stopped at the same place" : "DID NOT");
    *ok = *ok && sim_error == error;
  }
  out += *ok ? "\nverified: every rank bitwise identical; the simulator agrees (see exact above)\n"
             : "\nNOT verified: a row above is not approximately equal, or ranks differ\n";
  return out;
}

}  // namespace ddplab::report
