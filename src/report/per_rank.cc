#include "src/report/per_rank.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/model/module.h"
#include "src/model/norm.h"
#include "src/report/report.h"
#include "src/report/svg.h"

namespace ddplab::report {

NamedTensors buffer_values(const Module& model) {
  NamedTensors out;
  for (const Buffer* b : model.buffers()) {
    out.names.push_back(b->name);
    if (b->is_int64) {
      out.values.push_back({static_cast<float>(b->count)});
    } else {
      out.values.emplace_back(b->value.data(), b->value.data() + b->value.size());
    }
  }
  return out;
}

NamedTensors dropout_masks(const Module& model) {
  NamedTensors out;
  const auto* seq = dynamic_cast<const Sequential*>(&model);
  if (!seq) return out;
  for (size_t i = 0; i < seq->size(); ++i) {
    if (const auto* d = dynamic_cast<const Dropout*>(&(*seq)[i])) {
      out.names.push_back(fmt::format("model[{}]: {}", i, d->repr()));
      out.values.push_back(d->last_mask());
    }
  }
  return out;
}

namespace {

// Rows of every tensor, rank k against rank 0; nullopt with one rank or no tensors, or when a rank's
// tensors do not line up with rank 0's (then there is nothing sound to compare).
std::optional<PerRankTable> compare(const std::string& title, const std::vector<NamedTensors>& ranks) {
  if (ranks.size() < 2 || ranks[0].names.empty()) return std::nullopt;
  PerRankTable t;
  t.title = title;
  for (size_t i = 0; i < ranks[0].names.size(); ++i) {
    PerRankRow row{ranks[0].names[i], {}};
    const std::vector<float>& v0 = ranks[0].values[i];
    for (size_t k = 1; k < ranks.size(); ++k) {
      if (ranks[k].values.size() != ranks[0].values.size() || ranks[k].values[i].size() != v0.size()) {
        return std::nullopt;
      }
      row.ranks.push_back(cmp(row.name, ranks[k].values[i].data(), v0.data(), static_cast<int64_t>(v0.size())));
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

bool all_exact(const PerRankTable& t) {
  for (const PerRankRow& r : t.rows) {
    for (const CmpResult& c : r.ranks) {
      if (!c.exact) return false;
    }
  }
  return true;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

std::optional<PerRankTable> buffers_table(const ddp::Config& cfg, const std::string& title,
                                          const std::vector<NamedTensors>& ranks) {
  auto t = compare(title, ranks);
  if (!t) return t;
  const bool equal = all_exact(*t);
  // The cmp tables' explanation (src/report/report.cc), as one paragraph.
  t->why = one_line(equal ? "Every rank's buffers equal rank 0's: " + buffers_why(cfg, true)
                          : "Ranks differ from rank 0 in their buffers: " + buffers_why(cfg, false));
  return t;
}

std::optional<PerRankTable> masks_table(const ddp::Config& cfg, const std::string& title,
                                        const std::vector<NamedTensors>& ranks) {
  auto t = compare(title, ranks);
  if (!t) return t;
  const bool equal = all_exact(*t);
  std::string why;
  if (cfg.seed_per_rank) {
    why = "--seed-per-rank: each rank called manual_seed(seed + rank) after DDP(model), so each draws its own masks.";
  } else if (cfg.init == ddp::InitKind::per_rank) {
    why = "--init per-rank seeded each rank's generator with seed + rank, and Dropout draws from that generator.";
  } else {
    why =
        "Every rank called manual_seed(seed) alike, so every rank draws the same masks from its own global "
        "generator and drops the same units of its (different) batch: the common mistake. --seed-per-rank "
        "(manual_seed(seed + rank)) gives each rank its own.";
  }
  why += equal ? " Here every mask equals rank 0's." : " Here the masks differ from rank 0's.";
  t->why = why +
           " DDP does not touch the masks: it averages the gradients, whatever masks produced them, so the "
           "parameters agree either way.";
  return t;
}

void add_per_rank(ReportData& d, const ddp::Config& cfg, const std::string& title,
                  const std::vector<const Module*>& ranks) {
  std::vector<NamedTensors> buffers, masks;
  for (const Module* m : ranks) {
    buffers.push_back(buffer_values(*m));
    masks.push_back(dropout_masks(*m));
  }
  if (auto t = buffers_table(cfg, title, buffers)) d.buffers.push_back(std::move(*t));
  if (auto t = masks_table(cfg, title, masks)) d.masks.push_back(std::move(*t));
}

namespace {

using svg::escape;

const char* verdict(const CmpResult& c) { return c.exact ? "exact" : c.approximate ? "allclose" : "different"; }
// The cmp tables' row colours (html_report.cc's style sheet colours rows; these are cells, styled inline so
// that pages without these sections keep their style sheet byte for byte).
const char* colour(const CmpResult& c) { return c.exact ? "#e3f4e6" : c.approximate ? "#fff1c9" : "#fbd9d6"; }

std::string head(const char* what, const PerRankTable& t) {
  std::string out = t.title.empty() ? "" : fmt::format("<h3>{}</h3>\n", escape(t.title));
  out += fmt::format("<table><tr><th>{}</th><th>elements</th>", what);
  for (size_t k = 1; k <= t.rows.front().ranks.size(); ++k) out += fmt::format("<th>rank {} vs rank 0</th>", k);
  return out + "</tr>\n";
}

std::string buffers_html(const PerRankTable& t) {
  std::string out = head("buffer", t);
  for (const PerRankRow& r : t.rows) {
    out +=
        fmt::format("<tr><td class=\"mono\">{}</td><td class=\"num\">{}</td>", escape(r.name), r.ranks.front().numel);
    for (const CmpResult& c : r.ranks) {
      out += fmt::format("<td class=\"num\" style=\"background:{}\">{}<br>max |diff| {}</td>", colour(c), verdict(c),
                         escape(python_float_repr(c.maxdiff)));
    }
    out += "</tr>\n";
  }
  return out + "</table>\n<p class=\"why\">" + escape(t.why) + "</p>\n";
}

std::string masks_html(const PerRankTable& t) {
  std::string out = head("Dropout layer", t);
  for (const PerRankRow& r : t.rows) {
    out +=
        fmt::format("<tr><td class=\"mono\">{}</td><td class=\"num\">{}</td>", escape(r.name), r.ranks.front().numel);
    for (const CmpResult& c : r.ranks) {
      out += c.exact ? fmt::format("<td class=\"num\" style=\"background:{}\">same mask</td>", colour(c))
                     : fmt::format("<td class=\"num\" style=\"background:{}\">{} of {} differ</td>", colour(c),
                                   c.num_different, c.numel);
    }
    out += "</tr>\n";
  }
  return out + "</table>\n<p class=\"why\">" + escape(t.why) + "</p>\n";
}

}  // namespace

std::string per_rank_html(const ReportData& d) {
  std::string out;
  if (!d.buffers.empty()) {
    out +=
        "<section id=\"buffers\"><h2>Buffers per rank</h2>\n<p class=\"hint\">BatchNorm's running_mean, "
        "running_var and num_batches_tracked are buffers: state the optimizer does not step and the all-reduce "
        "does not average. Each row compares one buffer on every rank with rank 0's after training: "
        "<b>exact</b>, <b>allclose</b> or <b>different</b>, and the largest |difference|.</p>\n";
    for (const PerRankTable& t : d.buffers) out += buffers_html(t);
    out += "</section>\n";
  }
  if (!d.masks.empty()) {
    out +=
        "<section id=\"masks\"><h2>Dropout masks per rank</h2>\n<p class=\"hint\">In training, Dropout zeroes "
        "each element with probability p and scales the rest by 1/(1−p), drawing the mask from the process's "
        "global generator. Each row counts the elements of the last training step's mask that differ from rank "
        "0's.</p>\n";
    for (const PerRankTable& t : d.masks) out += masks_html(t);
    out += "</section>\n";
  }
  return out;
}

}  // namespace ddplab::report
