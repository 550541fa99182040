// --report, picture 1: the step strip.
#include <algorithm>

#include <fmt/format.h>

#include "src/check/output/report_html_parts.h"

namespace ddplab::check::html {
namespace {

// ---- 1. the step strip ------------------------------------------------------------------------------------

// Worse is larger. A whole-run step (digests compared, the sample replayed) says less than a replayed one: a column
// of both shows it.
enum class Cell { kAbsent, kUnchecked, kExact, kWholeRun, kClose, kDifferent };

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
  if (l.whole_run) return Cell::kWholeRun;
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
    case Cell::kWholeRun: return kWholeRun;
    case Cell::kClose: return kClose;
    case Cell::kDifferent: return kDifferent;
  }
  return kUnchecked;
}

const char* word_of(Cell c, bool sharded) {
  if (c == Cell::kWholeRun && sharded) return "whole run: its shards as its previous step left them, every value finite";
  switch (c) {
    case Cell::kAbsent: return "did not take part (joined, or its trace ended)";
    case Cell::kUnchecked: return "not checked";
    case Cell::kExact: return "exactly as predicted";
    case Cell::kWholeRun:
      return "whole run: its digests equal to the other ranks', its sample exactly as predicted, its all-reduce "
             "within rounding";
    case Cell::kClose: return "close to the prediction, not bit for bit";
    case Cell::kDifferent: return "DIFFERENT from the prediction, or a problem found here";
  }
  return "";
}


std::string step_range(const CheckResult& r, const std::pair<size_t, size_t>& c) {
  return c.first == c.second ? fmt::format("step {}", r.lines[c.first].step)
                             : fmt::format("steps {} to {}", r.lines[c.first].step, r.lines[c.second].step);
}

}  // namespace

// Columns of steps: [first line, last line] per column.
std::vector<std::pair<size_t, size_t>> columns(size_t n) {
  const size_t per = n > kMaxColumns ? (n + kMaxColumns - 1) / kMaxColumns : 1;
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t a = 0; a < n; a += per) out.push_back({a, std::min(n, a + per) - 1});
  return out;
}

// A key entry's width: its swatch, and its words at the legend's 12-px font (7.5 px a character, generous).
static double key_width(const char* word) { return 40 + 7.5 * static_cast<double>(std::string(word).size()); }

std::string step_strip(const CheckResult& r, const Finding* problem) {
  const size_t ws = static_cast<size_t>(std::max(r.world_size, 0));
  const double width = 960, left = 110, right = 24, top = 46;
  const double lane = std::clamp(440.0 / static_cast<double>(ws + 1), 9.0, 24.0);
  const double pw = width - left - right;
  const auto cols = columns(r.lines.size());
  const double cw = pw / static_cast<double>(std::max<size_t>(cols.size(), 1));
  const double strip_h = lane * static_cast<double>(ws + 1), axis_y = top + strip_h;
  // The key, laid out first: its entries wrap onto a second row rather than run past the figure's right edge
  // (six entries with the whole-run one are wider than the figure).
  std::vector<std::pair<const char*, const char*>> key = {
      {kExact, "exact"}, {kClose, r.step_exact ? "close, not exact" : "close (expected: see below)"},
      {kDifferent, "different or a problem"}, {kAbsent, "did not take part"}, {kUnchecked, "not checked"}};
  if (std::any_of(r.lines.begin(), r.lines.end(), [](const StepLine& l) { return l.whole_run; }))
    key.insert(key.begin() + 1, {kWholeRun, r.sharded ? "whole run: shards as left" : "whole run: digests, sample exact"});
  std::vector<std::pair<double, int>> at;  // each entry's x and row
  double kx = left, row = 0;
  for (const auto& entry : key) {
    const double w = key_width(entry.second);
    if (kx > left && kx + w > width - right) kx = left, ++row;
    at.push_back({kx, static_cast<int>(row)});
    kx += w;
  }
  const int rows = at.empty() ? 1 : at.back().second + 1;
  const double height = axis_y + 42 + 26 + 20.0 * (rows - 1);
  std::string out = fmt::format(
      "<svg id=\"steps-figure\" class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" role=\"img\" "
      "aria-label=\"every step of every rank against DDP's prediction\">\n",
      width, height);
  // Rows: one per rank, then the replicas.
  for (size_t k = 0; k <= ws; ++k) {
    const double y = top + lane * static_cast<double>(k);
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" class=\"lane\">{}</text>\n", left - 8,
                       y + lane / 2 + 4, k < ws ? fmt::format("rank {}", k) : r.sharded ? "shards" : "replicas");
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
        what = found ? fmt::format("rank {}: {} ({})", k, word_of(worst, r.sharded), kind_cause(*found))
                     : fmt::format("rank {}: {}", k, word_of(worst, r.sharded));
      } else if (r.sharded) {  // FSDP2: no replicas; each rank's shards changed by its own optimizer step alone
        bool ok = true, checked = false;
        for (size_t i = cols[c].first; i <= cols[c].second; ++i) {
          checked = checked || r.lines[i].params.checked > 0;
          ok = ok && r.lines[i].params.different == 0;
          for (const Finding& f : r.findings)
            ok = ok && !(f.step == r.lines[i].step && f.kind == "changed-outside-step");
        }
        fill = !checked && ok ? fill_of(Cell::kUnchecked) : ok ? kExact : kDifferent;
        what = !checked && ok ? "shards: not checked"
               : ok ? "shards: each rank's shards changed by its own optimizer step alone, as predicted"
                    : "shards: a rank's shard changed outside optimizer.step(), or not as predicted";
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
  for (size_t e = 0; e < key.size(); ++e) {
    const double kx = at[e].first, ky = axis_y + 52 + 20.0 * at[e].second;
    out += fmt::format(
        "<rect class=\"key\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"13\" height=\"13\" fill=\"{}\" stroke=\"#888\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"legend\">{}</text>\n",
        kx, ky - 10, key[e].first, kx + 18, ky, key[e].second);
  }
  return out + "</svg>\n";
}

}  // namespace ddplab::check::html
