// The parts of ddp_check's --report page (report_html.cc assembles them): escaping and the shared helpers,
// the colours, and the three pictures, each in a file of its own (report_strip.cc, report_norms.cc,
// report_data_map.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "src/check/check.h"
#include "src/report/svg.h"

namespace ddplab::check::html {

// &, <, >, " and ' as entities; other control characters (not tab/newline) as U+FFFD (svg::escape).
inline std::string esc(const std::string& s) { return svg::escape(s); }
std::string where(const Finding& f);
std::string kind_cause(const Finding& f);
// The ranks' colours: the --report charts' (svg::series_colour).
inline const char* rank_colour(size_t i) { return svg::series_colour(i); }
// The step strip's and the data map's fills.
inline constexpr const char* kExact = "#bfe6c6";
inline constexpr const char* kClose = "#ffe08a";
inline constexpr const char* kDifferent = "#f4a9a1";
inline constexpr const char* kAbsent = "#c9ccd1";
inline constexpr const char* kUnchecked = "#f4f5f7";
inline constexpr const char* kWholeRun = "#e3f4e6";  // a whole-run step: digests equal across ranks, sample exact
inline constexpr const char* kMarker = "#c00000";
inline constexpr const char* kOwn = "#0072B2";
inline constexpr const char* kShared = "#D55E00";
inline constexpr const char* kRepeat = "#F0E442";
inline constexpr size_t kMaxColumns = 240;  // the strip's columns at most: a longer run shows the worst of each run of steps
inline constexpr size_t kMaxEpochs = 60;    // epochs drawn at most (the text output has every one)
inline constexpr size_t kMaxRows = 400;     // the per-step table's rows at most (a longer run: those not all exact)

using svg::ticks;
inline std::string num(double v) { return svg::tick_label(v); }
// The first finding of severity "problem" on the step axis (lowest step; the first listed among equals), or null.
const Finding* first_problem(const CheckResult& r);
// The line (the x position) of a step: the last line whose step is at most `step`.
size_t line_of(const CheckResult& r, int64_t step);
std::string marker_label(const Finding& f);

// The strip's columns: [first line, last line] of the steps each column shows (one each, up to kMaxColumns).
std::vector<std::pair<size_t, size_t>> columns(size_t n);
// 1. Where the run first left DDP's semantics: a strip of steps by rank, a marker at the first problem.
std::string step_strip(const CheckResult& r, const Finding* problem);
// 2. Each rank's local gradient norm per step against the norm of the gradient DDP averaged.
std::string norm_chart(const CheckResult& r, const Finding* problem, std::string* note);
// 3. What each rank's loader yielded per epoch; *left_out: the epochs not drawn.
std::string data_map(const DataSummary& d, size_t* left_out);

}  // namespace ddplab::check::html
