// Inline SVG for --report: a line chart (loss per step) and a Gantt chart (the --trace timeline), as
// strings to paste into an HTML page. No scripts, no external resources; every text is HTML-escaped.
#pragma once

#include <string>
#include <vector>

namespace ddplab::svg {

// &, <, >, " and ' as entities; other control characters (not tab/newline) as U+FFFD.
std::string escape(const std::string& s);

// The colour of series i (ranks), from a palette that stays apart for colour-blind readers.
const char* series_colour(size_t i);

// About `target` round ticks (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> ticks(double lo, double hi, int target);
// Tick labels: 0.25, 1.5, 12000 (no exponent below a billion).
std::string tick_label(double v);

struct Series {
  std::string name;
  std::vector<double> y;  // y[i] at x = i + 1
  bool dashed = false;
  std::string colour;  // "" = series_colour(index)
};

// Points drawn per series at most: a longer series is drawn as the lowest and highest value of each run of
// consecutive points (its envelope), so that a page stays small however long the run (issue 19, cause 9).
constexpr size_t kMaxChartPoints = 1000;

// One line per series, with axes, ticks, axis labels and a legend.
std::string line_chart(const std::vector<Series>& series, const std::string& x_label, const std::string& y_label,
                       int width = 960, int height = 340);

struct Bar {
  size_t lane = 0;
  std::string label;               // shown inside the bar when it fits, always as a tooltip (<title>)
  std::string colour;              // fill
  double start = 0, duration = 0;  // x units (microseconds)
  bool instant = false;            // a marker at `start`
};

// Lanes top to bottom, a time axis in `unit`, bars and instant markers.
std::string gantt(const std::vector<std::string>& lanes, const std::vector<Bar>& bars, const std::string& unit,
                  int width = 960);

// One horizontal bar per item, top to bottom, from 0 to `value`: a bar chart of a few quantities (lab 007's
// compression error per hook and bucket, optimizer state per rank). With `log_scale` the axis is in decades
// (for values spanning many, e.g. float differences from 1e-9 to 1); values <= 0 then draw no bar.
struct BarItem {
  std::string label;  // left of the bar
  double value = 0;
  std::string text;    // right of the bar ("" = the value)
  std::string colour;  // "" = series_colour(0)
};
std::string bar_chart(const std::vector<BarItem>& items, const std::string& x_label, bool log_scale = false,
                      int width = 960);

}  // namespace ddplab::svg
