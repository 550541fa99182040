// The --report page's shared helpers (report_html_parts.h).
#include <fmt/format.h>

#include "src/check/output/report_html_parts.h"

namespace ddplab::check::html {

std::string where(const Finding& f) {
  std::string s = f.step >= 0 ? fmt::format("step {}", f.step) : "";
  if (f.rank >= 0) s += fmt::format("{}rank {}", s.empty() ? "" : ", ", f.rank);
  if (!f.name.empty()) s += fmt::format("{}'{}'", s.empty() ? "" : ", ", f.name);
  return s;
}

std::string kind_cause(const Finding& f) {
  return f.kind + (f.cause.empty() || f.cause == "bits" ? "" : "/" + f.cause);
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
