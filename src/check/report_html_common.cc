// The --report page's shared helpers (report_html_parts.h).
#include <cmath>

#include <fmt/format.h>

#include "src/check/report_html_parts.h"

namespace ddplab::check::html {

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

}  // namespace ddplab::check::html
