// --report, picture 2: the gradient norms.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "src/check/output/report_html_parts.h"

namespace ddplab::check::html {
namespace {

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

}  // namespace

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
  // FSDP2: each rank's .grad is its own shard of the reduced gradient, so the reduced gradient's norm is the root
  // of the sum of the shards' squared norms, and ranks whose shard norms differ are as it should be.
  if (r.sharded)
    for (size_t i = 0; i < n; ++i) {
      double sq = 0;
      bool all = ws > 0;
      for (size_t k = 0; k < ws; ++k) {
        const double v = at(r.ddp_norm, i, k);
        all = all && std::isfinite(v);
        sq += v * v;
      }
      ddp[i] = all ? std::sqrt(sq) : NAN;
    }
  std::vector<size_t> odd;  // ranks whose DDP gradient differs somewhere
  for (size_t k = 0; k < ws && !r.sharded; ++k)
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
  const std::string bold = r.sharded     ? "FSDP's reduced gradient (all ranks' shards of .grad)"
                           : odd.empty() ? "DDP's .grad (averaged)"
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
  // The ranks' own lines stop where whole-run steps keep no norm of a rank's gradient: a step of several
  // backwards (accumulation) keeps each micro-batch's sums, and a sum's norm cannot be had from its parts'.
  bool had_local = false;
  for (size_t i = 0; i < n; ++i) {
    bool local = false;
    for (size_t k = 0; k < ws; ++k) local = local || std::isfinite(at(r.local_norm, i, k));
    if (local) had_local = true;
    if (had_local && !local && r.lines[i].whole_run && std::isfinite(ddp[i])) {
      *note += fmt::format(
          " From step {} the ranks' own lines stop: a whole-run step keeps each backward's sums, and where a step "
          "has several (gradient accumulation, no_sync) or carries .grad from before, the norm of the rank's "
          "accumulated gradient cannot be had from them; the bold line goes on.",
          r.lines[i].step);
      break;
    }
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

}  // namespace ddplab::check::html
