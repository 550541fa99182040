// ddp_check's --report page: one self-contained HTML file (inline SVG, no script, nothing fetched). Three
// pictures, each with a title and a sentence or two on how to read it: where the run first left DDP's
// semantics (a strip of steps by rank, a marker at the first problem), each rank's local gradient norm per
// step against the norm of the gradient DDP averaged, and a data map (what each rank's loader yielded per
// epoch: its own samples, samples shared with another rank, repeats). Then the findings, the cmp table at
// the first divergence and the per-step, per-rank table. Every string from the run is HTML-escaped.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "src/check/check.h"

namespace ddplab::check {
namespace {

// &, <, >, " and ' as entities; other control characters (not tab/newline) as U+FFFD.
std::string esc(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') {
          out += "&#xFFFD;";
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string where(const Finding& f) {
  std::string s = f.step >= 0 ? fmt::format("step {}", f.step) : "";
  if (f.rank >= 0) s += fmt::format("{}rank {}", s.empty() ? "" : ", ", f.rank);
  if (!f.name.empty()) s += fmt::format("{}'{}'", s.empty() ? "" : ", ", f.name);
  return s;
}

std::string kind_cause(const Finding& f) {
  return f.kind + (f.cause.empty() || f.cause == "bits" ? "" : "/" + f.cause);
}

// The ranks' colours (Okabe-Ito, then a few more: apart for the common colour-vision deficiencies), as
// src/report/svg.cc draws them.
const char* rank_colour(size_t i) {
  static const char* kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9",
                                   "#D55E00", "#F0E442", "#7F3C8D", "#3969AC", "#80BA5A"};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

// The step strip's and the data map's fills.
constexpr const char* kExact = "#bfe6c6";
constexpr const char* kClose = "#ffe08a";
constexpr const char* kDifferent = "#f4a9a1";
constexpr const char* kAbsent = "#c9ccd1";
constexpr const char* kUnchecked = "#f4f5f7";
constexpr const char* kMarker = "#c00000";
constexpr const char* kOwn = "#0072B2";
constexpr const char* kShared = "#D55E00";
constexpr const char* kRepeat = "#F0E442";

// About `target` round ticks (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1.0;
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> out;
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  for (double k = first; k <= last; ++k) out.push_back(std::abs(k) < 0.5 ? 0.0 : k * step);
  return out;
}

std::string num(double v) {
  return std::abs(v) >= 1000 && std::abs(v) < 1e9 ? fmt::format("{:.0f}", v) : fmt::format("{:.4g}", v);
}

// The first finding of severity "problem" on the step axis (lowest step; the first listed among equals), or
// null.
const Finding* first_problem(const CheckResult& r) {
  const Finding* best = nullptr;
  for (const Finding& f : r.findings)
    if (f.severity == "problem" && f.step >= 0 && (!best || f.step < best->step)) best = &f;
  return best;
}

// The line (the x position) of a step: the last line whose step is at most `step` (lines follow the DDP
// iterations, whose step numbers may skip where a rank joined).
size_t line_of(const CheckResult& r, int64_t step) {
  size_t at = 0;
  for (size_t i = 0; i < r.lines.size(); ++i)
    if (r.lines[i].step <= step) at = i;
  return at;
}

std::string marker_label(const Finding& f) {
  return fmt::format("step {}: {} ({})", f.step, kind_cause(f), f.rank >= 0 ? fmt::format("rank {}", f.rank) : "all ranks");
}

// ---- 1. the step strip ------------------------------------------------------------------------------------

enum class Cell { kAbsent, kUnchecked, kExact, kClose, kDifferent };  // worse is larger

// A problem finding that lies on this step and rank: one at the step (its rank, or every rank's), or one of the
// whole run that says nothing trains (no step is then as it should be, however exact the arithmetic).
const Finding* problem_at(const CheckResult& r, const StepLine& l, size_t rank) {
  for (const Finding& f : r.findings) {
    if (f.severity != "problem") continue;
    const bool here = f.step == l.step || f.kind == "nothing-trains";
    if (here && (f.rank < 0 || static_cast<size_t>(f.rank) == rank)) return &f;
  }
  return nullptr;
}

Cell cell_of(const CheckResult& r, const StepLine& l, size_t rank) {
  if (rank < l.ran.size() && !l.ran[rank]) return Cell::kAbsent;
  if (problem_at(r, l, rank)) return Cell::kDifferent;
  const Counts none;
  const Counts& g = rank < l.rank_grads.size() ? l.rank_grads[rank] : none;
  const Counts& p = rank < l.rank_params.size() ? l.rank_params[rank] : none;
  if (g.different || p.different) return Cell::kDifferent;
  if (g.allclose || p.allclose) return Cell::kClose;
  if (g.checked + p.checked == 0) return Cell::kUnchecked;
  return Cell::kExact;
}

const char* fill_of(Cell c) {
  switch (c) {
    case Cell::kAbsent: return kAbsent;
    case Cell::kUnchecked: return kUnchecked;
    case Cell::kExact: return kExact;
    case Cell::kClose: return kClose;
    case Cell::kDifferent: return kDifferent;
  }
  return kUnchecked;
}

const char* word_of(Cell c) {
  switch (c) {
    case Cell::kAbsent: return "did not take part (joined, or its trace ended)";
    case Cell::kUnchecked: return "not checked";
    case Cell::kExact: return "exactly as predicted";
    case Cell::kClose: return "close to the prediction, not bit for bit";
    case Cell::kDifferent: return "DIFFERENT from the prediction, or a problem found here";
  }
  return "";
}

constexpr size_t kMaxColumns = 240;  // the strip's columns at most: a longer run shows the worst of each run of steps

// Columns of steps: [first line, last line] per column.
std::vector<std::pair<size_t, size_t>> columns(size_t n) {
  const size_t per = n > kMaxColumns ? (n + kMaxColumns - 1) / kMaxColumns : 1;
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t a = 0; a < n; a += per) out.push_back({a, std::min(n, a + per) - 1});
  return out;
}

std::string step_range(const CheckResult& r, const std::pair<size_t, size_t>& c) {
  return c.first == c.second ? fmt::format("step {}", r.lines[c.first].step)
                             : fmt::format("steps {} to {}", r.lines[c.first].step, r.lines[c.second].step);
}

std::string step_strip(const CheckResult& r, const Finding* problem) {
  const size_t ws = static_cast<size_t>(std::max(r.world_size, 0));
  const double width = 960, left = 110, right = 24, top = 46;
  const double lane = std::clamp(440.0 / static_cast<double>(ws + 1), 9.0, 24.0);
  const double pw = width - left - right;
  const auto cols = columns(r.lines.size());
  const double cw = pw / static_cast<double>(std::max<size_t>(cols.size(), 1));
  const double strip_h = lane * static_cast<double>(ws + 1), axis_y = top + strip_h;
  const double height = axis_y + 42 + 26;
  std::string out = fmt::format(
      "<svg id=\"steps-figure\" class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" role=\"img\" "
      "aria-label=\"every step of every rank against DDP's prediction\">\n",
      width, height);
  // Rows: one per rank, then the replicas.
  for (size_t k = 0; k <= ws; ++k) {
    const double y = top + lane * static_cast<double>(k);
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" class=\"lane\">{}</text>\n", left - 8,
                       y + lane / 2 + 4, k < ws ? fmt::format("rank {}", k) : "replicas");
    for (size_t c = 0; c < cols.size(); ++c) {
      std::string fill, what;
      if (k < ws) {
        Cell worst = Cell::kAbsent;
        const Finding* found = nullptr;
        for (size_t i = cols[c].first; i <= cols[c].second; ++i) {
          worst = std::max(worst, cell_of(r, r.lines[i], k));
          if (!found) found = problem_at(r, r.lines[i], k);
        }
        fill = fill_of(worst);
        what = found ? fmt::format("rank {}: {} ({})", k, word_of(worst), kind_cause(*found))
                     : fmt::format("rank {}: {}", k, word_of(worst));
      } else {
        bool equal = true;
        for (size_t i = cols[c].first; i <= cols[c].second; ++i) equal = equal && r.lines[i].replicas_equal;
        fill = equal ? kExact : kDifferent;
        what = equal ? "all ranks held the same parameters after the step" : "the ranks' parameters DIFFER after the step";
      }
      out += fmt::format(
          "<rect class=\"cell\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\" stroke=\"#fff\" "
          "stroke-width=\"{}\"><title>{}, {}</title></rect>\n",
          left + cw * static_cast<double>(c), y, cw, lane, fill, cw > 4 ? 1 : 0, esc(step_range(r, cols[c])), esc(what));
    }
  }
  // The step axis: ticks at round line positions, labelled with the step numbers.
  const auto x_of = [&](size_t line) {
    const size_t per = cols.empty() ? 1 : cols[0].second - cols[0].first + 1;
    return left + cw * (static_cast<double>(line / per) + 0.5);
  };
  if (!r.lines.empty()) {
    for (const double t : ticks(0, static_cast<double>(r.lines.size() - 1), 10)) {
      if (t < 0 || t > static_cast<double>(r.lines.size() - 1) || t != std::floor(t)) continue;
      const double x = x_of(static_cast<size_t>(t));
      out += fmt::format(
          "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"#999\"/>"
          "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\" class=\"tick\">{4}</text>\n",
          x, axis_y, axis_y + 5, axis_y + 19, r.lines[static_cast<size_t>(t)].step);
    }
  }
  out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"middle\" class=\"axis\">step</text>\n", left + pw / 2,
                     axis_y + 36);
  // Every problem on the axis as a small triangle (its finding as the tooltip); the first one tall, labelled.
  for (const Finding& f : r.findings) {
    if (f.severity != "problem" || f.step < 0 || &f == problem || r.lines.empty()) continue;
    out += fmt::format(
        "<path class=\"problem\" d=\"M{:.1f} {:.1f} l-4 -7 h8 z\" fill=\"{}\"><title>{}: {}</title></path>\n",
        x_of(line_of(r, f.step)), top - 2, kMarker, esc(marker_label(f)), esc(f.message));
  }
  if (problem && !r.lines.empty()) {
    const double x = x_of(line_of(r, problem->step));
    const bool to_left = x > left + pw * 0.6;
    out += fmt::format(
        "<g id=\"first-problem-marker\"><line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\" "
        "stroke-width=\"2.5\"/><path d=\"M{0:.1f} {1:.1f} l-7 -11 h14 z\" fill=\"{3}\"/>"
        "<text x=\"{4:.1f}\" y=\"{5:.1f}\" text-anchor=\"{6}\" class=\"marker\" fill=\"{3}\">first problem: {7}</text>"
        "<title>{8}</title></g>\n",
        x, top - 2, axis_y, kMarker, to_left ? x - 10 : x + 10, top - 16, to_left ? "end" : "start",
        esc(marker_label(*problem)), esc(problem->message));
  }
  // The key.
  double kx = left;
  const double ky = height - 16;
  for (const auto& [fill, word] : std::vector<std::pair<const char*, const char*>>{
           {kExact, "exact"}, {kClose, r.step_exact ? "close, not exact" : "close (expected: see below)"},
           {kDifferent, "different or a problem"},
           {kAbsent, "did not take part"}, {kUnchecked, "not checked"}}) {
    out += fmt::format(
        "<rect class=\"key\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"13\" height=\"13\" fill=\"{}\" stroke=\"#888\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"legend\">{}</text>\n",
        kx, ky - 10, fill, kx + 18, ky, word);
    kx += 40 + 7.5 * static_cast<double>(std::string(word).size());
  }
  return out + "</svg>\n";
}

// ---- 2. the gradient norms ----------------------------------------------------------------------------------

constexpr size_t kMaxPoints = 1000;  // per line: a longer run is drawn as each run of steps' lowest and highest

// An SVG path through the finite values (a gap at NaN), x = the line index.
template <class X, class Y>
std::string path_of(const std::vector<double>& v, X x, Y y) {
  const size_t n = v.size(), per = n > kMaxPoints ? (n + kMaxPoints / 2 - 1) / (kMaxPoints / 2) : 1;
  std::string d;
  bool pen = false;
  for (size_t a = 0; a < n; a += per) {
    std::vector<size_t> keep;
    size_t lo = n, hi = n;
    for (size_t k = a; k < std::min(n, a + per); ++k) {
      if (!std::isfinite(v[k])) continue;
      if (lo == n || v[k] < v[lo]) lo = k;
      if (hi == n || v[k] > v[hi]) hi = k;
    }
    if (lo == n) {
      pen = false;
      continue;
    }
    keep.push_back(std::min(lo, hi));
    if (hi != lo) keep.push_back(std::max(lo, hi));
    for (const size_t k : keep) {
      d += fmt::format("{}{:.1f} {:.1f} ", pen ? "L" : "M", x(k), y(v[k]));
      pen = true;
    }
  }
  return d;
}

std::string norm_chart(const CheckResult& r, const Finding* problem, std::string* note) {
  const size_t n = r.lines.size(), ws = static_cast<size_t>(std::max(r.world_size, 0));
  const auto at = [](const std::vector<std::vector<double>>& m, size_t i, size_t k) {
    return i < m.size() && k < m[i].size() ? m[i][k] : NAN;
  };
  // DDP's line: per step, the .grad norm of the lowest rank that recorded one; a rank whose .grad norm
  // differs from it at some step gets a dashed line of its own.
  std::vector<double> ddp(n, NAN);
  std::vector<int> source(n, -1);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < ws && source[i] < 0; ++k)
      if (std::isfinite(at(r.ddp_norm, i, k))) ddp[i] = at(r.ddp_norm, i, k), source[i] = static_cast<int>(k);
  std::vector<size_t> odd;  // ranks whose DDP gradient differs somewhere
  for (size_t k = 0; k < ws; ++k)
    for (size_t i = 0; i < n; ++i) {
      const double v = at(r.ddp_norm, i, k);
      if (std::isfinite(v) && std::abs(v - ddp[i]) > 1e-9 * std::max(1.0, std::abs(ddp[i]))) {
        odd.push_back(k);
        break;
      }
    }
  double hi = 0;
  bool any = false;
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < ws; ++k)
      for (const double v : {at(r.local_norm, i, k), at(r.ddp_norm, i, k)})
        if (std::isfinite(v)) hi = std::max(hi, v), any = true;
  if (!any) return "";
  // Where the ranks' .grad after DDP differ, the bold line is the lowest rank's (rank 0's, usually), named so.
  int base = -1;  // -1: none yet, -2: not the same rank at every step
  for (const int s : source) {
    if (s < 0 || base == -2) continue;
    base = base == -1 || base == s ? s : -2;
  }
  const std::string bold = odd.empty() ? "DDP's .grad (averaged)"
                           : base >= 0 ? fmt::format("rank {}'s .grad after DDP", base)
                                       : "lowest rank's .grad after DDP";
  if (!odd.empty()) {
    std::string who;
    for (size_t k : odd) who += fmt::format("{}{}", who.empty() ? "" : ", ", k);
    *note = fmt::format(
        " Here the ranks' .grad after DDP differ: the bold line is {} and a dashed line is another rank's (rank{} "
        "{}); DDP did not leave the same average on every rank.",
        base >= 0 ? fmt::format("rank {}'s", base) : "the lowest rank's", odd.size() > 1 ? "s" : "", who);
  }
  const double width = 960, height = 360, left = 76, right = 236, top = 34, bottom = 50;
  const double pw = width - left - right, ph = height - top - bottom;
  const std::vector<double> yt = ticks(0, hi > 0 ? hi : 1, 6);
  const double ymax = yt.back() > 0 ? yt.back() : 1;
  const auto X = [&](size_t i) {
    return n <= 1 ? left + pw / 2 : left + static_cast<double>(i) / static_cast<double>(n - 1) * pw;
  };
  const auto Y = [&](double v) { return top + (ymax - v) / ymax * ph; };
  std::string out = fmt::format(
      "<svg id=\"norms-figure\" class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" role=\"img\" "
      "aria-label=\"gradient norm per step: each rank's local gradient and DDP's average\">\n",
      width, height);
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fff\" stroke=\"#999\"/>\n", left, top,
                     pw, ph);
  for (const double t : yt)
    out += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#e3e3e3\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\" class=\"tick\">{5}</text>\n",
        left, left + pw, Y(t), left - 6, Y(t) + 4, num(t));
  if (n > 0) {
    for (const double t : ticks(0, static_cast<double>(n - 1), 10)) {
      if (t < 0 || t > static_cast<double>(n - 1) || t != std::floor(t)) continue;
      out += fmt::format(
          "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#999\"/>"
          "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\" class=\"tick\">{4}</text>\n",
          X(static_cast<size_t>(t)), top + ph, top + ph + 5, top + ph + 19, r.lines[static_cast<size_t>(t)].step);
    }
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"axis\">step</text>\n", left + pw / 2,
                     height - 8);
  out += fmt::format(
      "<text x=\"16\" y=\"{0}\" text-anchor=\"middle\" class=\"axis\" transform=\"rotate(-90 16 {0})\">gradient norm"
      "</text>\n",
      top + ph / 2);
  if (problem && n > 0) {
    const double x = X(line_of(r, problem->step));
    out += fmt::format(
        "<line class=\"problem-line\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"{3}\" "
        "stroke-width=\"1.5\" stroke-dasharray=\"5 4\"><title>first problem: {5}</title></line>"
        "<text x=\"{0:.1f}\" y=\"{4}\" text-anchor=\"middle\" class=\"tick\" fill=\"{3}\">step {6}</text>\n",
        x, top, top + ph, kMarker, top - 6, esc(marker_label(*problem)), problem->step);
  }
  // DDP's average first (under the ranks' thin lines), bold; then each rank's own; then the odd ranks' .grad.
  struct Line {
    std::string name, colour, d;
    double stroke;
    bool dashed;
  };
  std::vector<Line> lines;
  lines.push_back({bold, "#111", path_of(ddp, X, Y), 4.0, false});
  for (size_t k = 0; k < ws; ++k) {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = at(r.local_norm, i, k);
    lines.push_back({fmt::format("rank {}'s own gradient", k), rank_colour(k), path_of(v, X, Y), 1.6, false});
  }
  for (size_t k : odd) {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = at(r.ddp_norm, i, k);
    lines.push_back({fmt::format("rank {}'s .grad after DDP", k), rank_colour(k), path_of(v, X, Y), 2.6, true});
  }
  for (const Line& l : lines) {
    out += fmt::format(
        "<path class=\"series\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" stroke-linejoin=\"round\"{} d=\"{}\">"
        "<title>{}</title></path>\n",
        l.colour, l.stroke, l.dashed ? " stroke-dasharray=\"7 4\"" : "", l.d, esc(l.name));
  }
  if (n <= 40) {  // few steps: mark the points
    for (size_t k = 0; k < ws; ++k)
      for (size_t i = 0; i < n; ++i)
        if (std::isfinite(at(r.local_norm, i, k)))
          out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.6\" fill=\"{}\"/>", X(i), Y(at(r.local_norm, i, k)),
                             rank_colour(k));
    out += "\n";
  }
  const size_t shown = std::min<size_t>(lines.size(), 14);
  for (size_t i = 0; i < shown; ++i) {
    const double y = top + 10 + 20.0 * static_cast<double>(i);
    out += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" stroke=\"{3}\" stroke-width=\"{4}\"{5}/>"
        "<text x=\"{6}\" y=\"{7}\" class=\"legend\">{8}</text>\n",
        left + pw + 12, left + pw + 38, y, lines[i].colour, std::max(3.0, lines[i].stroke),
        lines[i].dashed ? " stroke-dasharray=\"7 4\"" : "", left + pw + 44, y + 4, esc(lines[i].name));
  }
  if (lines.size() > shown)
    out += fmt::format("<text x=\"{}\" y=\"{}\" class=\"legend\">... {} more</text>\n", left + pw + 12,
                       top + 14 + 20.0 * static_cast<double>(shown), lines.size() - shown);
  return out + "</svg>\n";
}

// ---- 3. the data map ----------------------------------------------------------------------------------------

constexpr size_t kMaxEpochs = 60;  // epochs drawn at most (the text output has every one)
constexpr size_t kMaxRows = 400;    // the per-step table's rows at most (a longer run: those not all exact)

std::string data_map(const DataSummary& d, size_t* left_out) {
  // Epochs in order of (loader, iteration), ranks in order.
  std::map<std::pair<int64_t, int64_t>, std::vector<const EpochLine*>> groups;
  std::map<int64_t, int> loaders;
  for (const EpochLine& e : d.epochs) groups[{e.loader, e.iteration}].push_back(&e), loaders[e.loader] = 1;
  int64_t most = 1;
  for (const EpochLine& e : d.epochs) most = std::max(most, e.seen);
  // The index map, where the checker drew one (a row per epoch line): x is then the sample index.
  std::map<const EpochLine*, const DataMapRow*> by_line;
  if (d.map.size() == d.epochs.size())
    for (size_t i = 0; i < d.map.size(); ++i) {
      by_line[&d.epochs[i]] = &d.map[i];
      most = std::max(most, d.map[i].base_len);
    }
  const auto epoch_label = [&](const std::pair<int64_t, int64_t>& key) {
    return loaders.size() > 1 ? fmt::format("loader {} epoch {}", key.first, key.second)
                              : fmt::format("epoch {}", key.second);
  };
  size_t longest = 0;
  for (const auto& kv : groups) longest = std::max(longest, epoch_label(kv.first).size());
  const double width = 960, left = std::max(150.0, 70 + 8.0 * static_cast<double>(longest)), right = 330, top = 10,
               row = 18, gap = 10;
  const double pw = width - left - right;
  *left_out = groups.size() > kMaxEpochs ? groups.size() - kMaxEpochs : 0;
  double height = top;
  size_t g = 0;
  for (const auto& kv : groups) {
    if (g++ == kMaxEpochs) break;
    height += row * static_cast<double>(kv.second.size()) + gap;
  }
  const double axis_y = height;
  height += 38 + 28;
  std::string out = fmt::format(
      "<svg id=\"data-figure\" class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" role=\"img\" "
      "aria-label=\"the samples each rank trained on, per epoch\">\n",
      width, height);
  const auto X = [&](double v) { return left + v / static_cast<double>(most) * pw; };
  for (const double t : ticks(0, static_cast<double>(most), 6)) {
    if (t > static_cast<double>(most) || t != std::floor(t)) continue;
    out += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#e3e3e3\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\" class=\"tick\">{4}</text>\n",
        X(t), top, axis_y + 5, axis_y + 19, num(t));
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"axis\">{}</text>\n", left + pw / 2,
                     axis_y + 34,
                     by_line.empty() ? "samples the rank's loader yielded in the epoch"
                                     : "sample index in the dataset (under every Subset and random_split)");
  double y = top;
  g = 0;
  for (const auto& [key, eps] : groups) {
    if (g++ == kMaxEpochs) break;
    const std::string epoch = epoch_label(key);
    out += fmt::format("<text x=\"4\" y=\"{:.1f}\" class=\"lane epoch\">{}</text>\n", y + row / 2 + 4, esc(epoch));
    for (const EpochLine* e : eps) {
      const DataMapRow* cells = by_line.count(e) ? by_line.at(e) : nullptr;
      const int64_t repeats = std::max<int64_t>(0, e->seen - e->distinct);
      const int64_t shared = std::clamp<int64_t>(e->shared, 0, e->distinct);
      const int64_t own = std::max<int64_t>(0, e->distinct - shared);
      out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" class=\"lane\">rank {}</text>", left - 8,
                         y + row / 2 + 4, e->rank);
      double x = left;
      // With the indices drawn: one cell per stretch of the base dataset, where the rank's samples lie.
      for (size_t c = 0; cells && c < cells->cells.size(); ++c) {
        const char k = cells->cells[c];
        if (k == '.') continue;
        const double cw = pw / static_cast<double>(cells->cells.size());
        out += fmt::format(
            "<rect class=\"cell\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\"/>", left + cw * c,
            y + 2, cw, row - 4, k == 'S' ? kShared : k == 'r' ? kRepeat : kOwn);
      }
      for (const auto& [count, fill, word] : cells ? std::vector<std::tuple<int64_t, const char*, const char*>>{} : std::vector<std::tuple<int64_t, const char*, const char*>>{
               {own, kOwn, "only this rank trained on"},
               {shared, kShared, "another rank trained on too"},
               {repeats, kRepeat, "repeats of a sample this rank already had in the epoch"}}) {
        if (count <= 0) continue;
        const double w = X(static_cast<double>(count)) - left;
        out += fmt::format(
            "<rect class=\"samples\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\">"
            "<title>{}, rank {}: {} sample{} {}</title></rect>",
            x, y + 2, std::max(w, 1.0), row - 4, fill, esc(epoch), e->rank, count, count == 1 ? "" : "s", word);
        x += w;
      }
      const bool same = e->order_changed == 0;
      out += fmt::format(
          "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"bar{}\">{} seen, {} shared{}{}</text>\n", left + pw + 8,
          y + row / 2 + 4, same ? " same" : "", e->seen, e->shared,
          repeats ? fmt::format(", {} repeated", repeats) : "",
          e->order_changed < 0 ? "" : same ? ", SAME order as last epoch" : ", order changed");
      y += row;
    }
    y += gap;
  }
  double kx = left;
  const double ky = height - 10;
  for (const auto& [fill, word] : std::vector<std::pair<const char*, const char*>>{
           {kOwn, "this rank only"}, {kShared, "shared with another rank"}, {kRepeat, "repeated on this rank"}}) {
    out += fmt::format(
        "<rect class=\"key\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"13\" height=\"13\" fill=\"{}\" stroke=\"#888\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"legend\">{}</text>\n",
        kx, ky - 10, fill, kx + 18, ky, word);
    kx += 40 + 7.5 * static_cast<double>(std::string(word).size());
  }
  return out + "</svg>\n";
}

constexpr const char* kStyle =
    "body{font-family:system-ui,-apple-system,\"Segoe UI\",sans-serif;margin:0;background:#f4f5f7;color:#1d1f23;"
    "line-height:1.45}main{max-width:1010px;margin:0 auto;padding:20px}"
    "h1{font-size:26px;margin:0 0 4px}h2{font-size:19px;margin:0 0 8px}.sub{color:#555;margin:0 0 12px}"
    "section{background:#fff;border:1px solid #dcdfe4;border-radius:8px;padding:16px 20px;margin:16px 0}"
    "p.hint{color:#555;margin:4px 0 10px}p.first{background:#fbe9e7;border-left:4px solid #c00000;padding:8px 12px}"
    "p.clean{background:#e3f4e6;border-left:4px solid #2e7d32;padding:8px 12px}"
    "table{border-collapse:collapse;font-size:13.5px;margin:6px 0}"
    "td,th{border:1px solid #d6d9de;padding:2px 8px;text-align:right;vertical-align:top}th{background:#eef0f3}"
    "td.l,th.l{text-align:left}.bad td{background:#fbd9d6}.ok td{background:#e3f4e6}.note td{background:#fff8dc}"
    "code{font-family:\"DejaVu Sans Mono\",Menlo,Consolas,monospace;font-size:12.5px}"
    "svg.chart{max-width:100%;height:auto;display:block}"
    "svg text.tick{font-size:12px;fill:#333}svg text.axis{font-size:13px;fill:#111;font-weight:600}"
    "svg text.legend,svg text.lane{font-size:13px;fill:#111}svg text.epoch{font-weight:600}"
    "svg text.bar{font-size:12px;fill:#333}svg text.same{fill:#c00000;font-weight:600}"
    "svg text.marker{font-size:13px;font-weight:700}summary{cursor:pointer;color:#0b5394;margin:6px 0}";

}  // namespace

std::string format_html(const CheckResult& r) {
  const Finding* problem = first_problem(r);
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ddp_check: {}</title>"
      "<style>{}</style></head>\n<body><main>\n",
      r.problems() ? "problems" : "as predicted", kStyle);
  out += fmt::format("<h1>ddp_check: {}</h1>\n", r.problems() ? "problems" : "as predicted");
  out += fmt::format("<p class=\"sub\"><code>{}</code>: world_size {}, backend {}, torch {}, {} steps recorded.</p>\n",
                     esc(r.run_dir), r.world_size, esc(r.backend), esc(r.torch_version), r.steps.size());
  out += fmt::format("<p class=\"sub\">Addition order: {}.<br>Buckets from iteration 1: <code>{}</code>{}</p>\n",
                     esc(r.order), esc(r.buckets), r.step_exact ? "" : "<br>Optimizer step: " + esc(r.step_why));

  // 1. Where the run first left DDP's semantics.
  out += "<section id=\"first-problem\"><h2>Where the run first left DDP's semantics</h2>\n"
         "<p class=\"hint\">One row per rank and one column per step: green where the rank's .grad after backward and "
         "its parameters after optimizer.step() are exactly what DDP's arithmetic predicts from the ranks' own "
         "gradients, amber where close but not bit for bit, red where they differ or a problem was found at that step "
         "(a run that trains nothing is red throughout), grey where the rank took no part. "
         "The bottom row says whether all ranks held the same parameters after the step; the red marker stands at "
         "the first step with a problem (other problems are small triangles: hover for the message).";
  if (!r.step_exact)
    out += " Amber is expected in this run: the optimizer step is compared allclose, not bit for bit (" +
           esc(r.step_why) + ").";
  if (r.lines.size() > kMaxColumns)
    out += fmt::format(" The run has {} steps: each column is a run of {} consecutive steps, coloured as its worst.",
                       r.lines.size(), columns(r.lines.size())[0].second + 1);
  out += "</p>\n";
  if (!r.lines.empty()) out += step_strip(r, problem);
  if (problem) {
    out += fmt::format("<p class=\"first\">First problem at <b>{}</b>: {}</p>\n", esc(marker_label(*problem)),
                       esc(problem->message));
  } else if (r.problems()) {
    for (const Finding& f : r.findings)
      if (f.severity == "problem") {
        out += fmt::format("<p class=\"first\">The first problem, <b>{}</b>, belongs to no step (it concerns the whole "
                           "run): {}</p>\n",
                           esc(kind_cause(f)), esc(f.message));
        break;
      }
  } else {
    out += "<p class=\"clean\">No problem: every recorded step of every rank did what DDP's semantics say.</p>\n";
  }
  if (r.first_divergence.step >= 0) {
    out += fmt::format("<h3>First divergence, step {}</h3><p class=\"hint\">{}: each tensor against the reference. "
                       "\"exact\" is every bit equal, \"approximate\" is torch.allclose.</p>\n"
                       "<table id=\"divergence\"><tr><th class=l>tensor</th><th>exact</th><th>approximate</th>"
                       "<th>maxdiff</th><th>values differing</th></tr>\n",
                       r.first_divergence.step, esc(r.first_divergence.title));
    for (const CmpResult& c : r.first_divergence.rows)
      out += fmt::format("<tr class={}><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} of {}</td></tr>\n",
                         c.exact ? "ok" : "bad", esc(c.name), c.exact ? "True" : "False", c.approximate ? "True" : "False",
                         esc(python_float_repr(c.maxdiff)), c.num_different, c.numel);
    out += "</table>\n";
    if (!r.first_divergence.missing.empty()) out += "<p class=\"hint\">" + esc(r.first_divergence.missing) + "</p>\n";
  }
  out += "</section>\n";

  // The findings.
  out += "<section id=\"findings\"><h2>Findings</h2>\n";
  if (r.findings.empty()) {
    out += "<p>None: every rank did what DDP's semantics say.</p>\n";
  } else {
    out += "<table><tr><th class=l>severity</th><th class=l>kind</th><th class=l>where</th><th class=l>what</th></tr>\n";
    for (const Finding& f : r.findings)
      out += fmt::format("<tr class={}><td class=l>{}</td><td class=l>{}</td><td class=l>{}</td><td class=l>{}</td></tr>\n",
                         f.severity == "problem" ? "bad" : "note", esc(f.severity), esc(kind_cause(f)), esc(where(f)),
                         esc(f.message));
    out += "</table>\n";
  }
  out += "</section>\n";

  // 2. The gradient norms.
  std::string note;
  const std::string norms = norm_chart(r, problem, &note);
  out += "<section id=\"norms\"><h2>Gradient norms: each rank's own gradient against DDP's average</h2>\n";
  if (norms.empty()) {
    out += "<p class=\"hint\">No gradient was recorded, so there is nothing to draw.</p>\n";
  } else {
    out += "<p class=\"hint\">Each thin line is the norm of the gradient one rank computed from its own batch, before "
           "DDP's all-reduce; the bold black line is the norm of the .grad DDP left after averaging them, the gradient "
           "every rank's optimizer steps with. The ranks' own lines differ because their batches differ, and the "
           "average's norm is at most the mean of theirs (smaller where their gradients point different ways)." +
           esc(note) + "</p>\n" + norms;
  }
  out += "</section>\n";

  // 3. The data map.
  out += "<section id=\"data\"><h2>Data map: what each rank trained on, epoch by epoch</h2>\n";
  if (r.data.source == "sampler" && !r.data.epochs.empty()) {
    size_t left_out = 0;
    const std::string map = data_map(r.data, &left_out);
    if (r.data.map.size() == r.data.epochs.size())
      out += "<p class=\"hint\">One row per rank and epoch (an iteration of a training DataLoader) over the dataset's "
             "sample indices: blue where the rank trained on samples only it had in that epoch, red where another rank "
             "trained on the same samples, yellow where the rank was given a sample twice; blank where it had none. "
             "With a DistributedSampler the rows of one epoch tile the dataset without overlap (at most world_size - 1 "
             "red samples of padding).";
    else
      out += "<p class=\"hint\">One bar per rank and epoch (an iteration of a training DataLoader), as long as the "
           "number of samples the rank's loader yielded: blue for samples only this rank trained on in that epoch, "
           "red for samples another rank trained on too, yellow for repeats of a sample the rank already had in the "
           "epoch. With a DistributedSampler every bar is blue and of the same length, apart from at most "
           "world_size - 1 red samples of padding.";
    if (left_out)
      out += fmt::format(" The first {} epochs are drawn; the text output lists the other {}.", kMaxEpochs, left_out);
    out += "</p>\n" + map;
    if (!r.data.verdict.empty()) out += fmt::format("<p>Data: {}.</p>\n", esc(r.data.verdict));
  } else {
    out += fmt::format(
        "<p class=\"hint\">No sample indices were recorded (data source: {}): the recorder reads them from the "
        "sampler of each DataLoader; batches made by hand or from an IterableDataset have none, and the data "
        "findings then come from fingerprints of the inputs.</p>\n",
        esc(r.data.source));
  }
  out += "</section>\n";

  // One row per step and rank: each rank's .grad after backward and parameters after the step, against
  // the prediction (exact / allclose / different tensors), and whether the replicas agreed after the step.
  // A long run shows only the rows that are not all exact (at most kMaxRows): the text output has every step.
  const auto exact_row = [](const StepLine& l, size_t k) {
    return l.replicas_equal && l.rank_grads[k].exact == l.rank_grads[k].checked &&
           l.rank_params[k].exact == l.rank_params[k].checked;
  };
  size_t rows = 0, inexact = 0;
  for (const StepLine& l : r.lines)
    for (size_t k = 0; k < l.rank_grads.size() && k < l.rank_params.size(); ++k) ++rows, inexact += !exact_row(l, k);
  const bool all = rows <= kMaxRows;
  const size_t shown = all ? rows : std::min(inexact, kMaxRows);
  out += "<section id=\"per-step\"><h2>Per step and rank: predicted vs recorded</h2>\n";
  if (!all)
    out += fmt::format("<p class=\"hint\">{} rows, {} of them not all exact: {} shown{}.</p>\n", rows, inexact,
                       shown == inexact ? "those" : fmt::format("the first {} of those", shown),
                       " (the text output has every step)");
  out += shown > 64 ? fmt::format("<details><summary>{} rows</summary>\n", shown) : "";
  out += "<table><tr><th>step</th><th>rank</th><th>grads exact</th><th>allclose</th><th>different</th>"
         "<th>params exact</th><th>allclose</th><th>different</th><th>replicas</th></tr>\n";
  size_t written = 0;
  for (const StepLine& l : r.lines) {
    for (size_t k = 0; k < l.rank_grads.size() && k < l.rank_params.size(); ++k) {
      if (!all && (exact_row(l, k) || written == shown)) continue;
      ++written;
      const Counts& g = l.rank_grads[k];
      const Counts& p = l.rank_params[k];
      out += fmt::format("<tr class={}><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}/{}</td>"
                         "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
                         l.replicas_equal && !g.different && !p.different ? "ok" : "bad", l.step, k, g.exact,
                         g.checked, g.allclose, g.different, p.exact, p.checked, p.allclose, p.different,
                         l.replicas_equal ? "equal" : "differ");
    }
  }
  out += "</table>\n";
  out += shown > 64 ? "</details>\n" : "";
  out += "</section>\n</main></body></html>\n";
  return out;
}

}  // namespace ddplab::check
