#include "src/report/svg.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace ddplab::svg {

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
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

const char* series_colour(size_t i) {
  // Okabe-Ito, then a few more: distinguishable with the common colour-vision deficiencies.
  static const char* kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9",
                                   "#D55E00", "#F0E442", "#7F3C8D", "#3969AC", "#80BA5A"};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

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

std::string tick_label(double v) {
  return std::abs(v) >= 1000 && std::abs(v) < 1e9 ? fmt::format("{:.0f}", v) : fmt::format("{:.4g}", v);
}

namespace {

// Dark text on a light fill, white on a dark one (fill as #RRGGBB).
const char* text_on(const std::string& fill) {
  if (fill.size() != 7 || fill[0] != '#') return "#fff";
  const auto c = [&](size_t i) { return static_cast<double>(std::stoi(fill.substr(i, 2), nullptr, 16)); };
  return 0.299 * c(1) + 0.587 * c(3) + 0.114 * c(5) > 150 ? "#111" : "#fff";
}

}  // namespace

std::string line_chart(const std::vector<Series>& series, const std::string& x_label, const std::string& y_label,
                       int width, int height) {
  const double left = 70, right = 190, top = 20, bottom = 50;
  const double pw = width - left - right, ph = height - top - bottom;
  double lo = INFINITY, hi = -INFINITY;
  size_t n = 0;
  for (const Series& s : series) {
    for (const double y : s.y) {
      if (std::isfinite(y)) lo = std::min(lo, y), hi = std::max(hi, y);
    }
    n = std::max(n, s.y.size());
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi - lo < 1e-12) lo -= 0.5, hi += 0.5;
  const std::vector<double> yt = ticks(lo, hi, 6);
  lo = std::min(lo, yt.front());
  hi = std::max(hi, yt.back());
  const double xmax = std::max<double>(2, static_cast<double>(n));
  const auto X = [&](double x) { return left + (x - 1) / (xmax - 1) * pw; };
  const auto Y = [&](double y) { return top + (hi - y) / (hi - lo) * ph; };

  std::string out = fmt::format(
      "<svg class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" "
      "height=\"{1}\" role=\"img\" aria-label=\"{2}\">\n",
      width, height, escape(y_label + " per " + x_label));
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fff\" stroke=\"#999\"/>\n", left, top,
                     pw, ph);
  for (const double t : yt) {
    out += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#e3e3e3\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\" class=\"tick\">{5}</text>\n",
        left, left + pw, Y(t), left - 6, Y(t) + 4, tick_label(t));
  }
  for (const double t : ticks(1, xmax, 10)) {
    if (t < 1 || t != std::floor(t)) continue;
    out += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#999\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\" class=\"tick\">{4}</text>\n",
        X(t), top + ph, top + ph + 5, top + ph + 19, tick_label(t));
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"axis\">{}</text>\n", left + pw / 2,
                     height - 8, escape(x_label));
  out += fmt::format(
      "<text x=\"16\" y=\"{0}\" text-anchor=\"middle\" class=\"axis\" transform=\"rotate(-90 16 {0})\">{1}</text>\n",
      top + ph / 2, escape(y_label));
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    const std::string colour = s.colour.empty() ? series_colour(i) : s.colour;
    std::string pts;
    // Steps per run, the same for every line; 1 (every point) up to kMaxChartPoints.
    const size_t per = n > kMaxChartPoints ? (n + kMaxChartPoints / 2 - 1) / (kMaxChartPoints / 2) : 1;
    for (size_t a = 0; a<s.y.size(); a += per> 1 ? per : 1) {
      if (per <= 1) {
        if (std::isfinite(s.y[a])) pts += fmt::format("{:.1f},{:.1f} ", X(static_cast<double>(a + 1)), Y(s.y[a]));
        continue;
      }
      size_t lo_k = a, hi_k = a;  // the run's lowest and highest finite values, drawn in step order
      for (size_t k = a; k < std::min(a + per, s.y.size()); ++k) {
        if (!std::isfinite(s.y[k])) continue;
        if (!std::isfinite(s.y[lo_k]) || s.y[k] < s.y[lo_k]) lo_k = k;
        if (!std::isfinite(s.y[hi_k]) || s.y[k] > s.y[hi_k]) hi_k = k;
      }
      std::vector<size_t> keep = {std::min(lo_k, hi_k)};
      if (hi_k != lo_k) keep.push_back(std::max(lo_k, hi_k));
      for (const size_t k : keep) {
        if (std::isfinite(s.y[k])) pts += fmt::format("{:.1f},{:.1f} ", X(static_cast<double>(k + 1)), Y(s.y[k]));
      }
    }
    out += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\"{} points=\"{}\"><title>{}</title></polyline>\n",
        colour, s.dashed ? 2.5 : 1.8, s.dashed ? " stroke-dasharray=\"7 4\"" : "", pts, escape(s.name));
    if (s.y.size() <= 40) {  // few points: mark them
      for (size_t k = 0; k < s.y.size(); ++k) {
        if (!std::isfinite(s.y[k])) continue;
        out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.6\" fill=\"{}\"/>", X(static_cast<double>(k + 1)),
                           Y(s.y[k]), colour);
      }
      out += "\n";
    }
  }
  // Legend: at most 12 entries, then how many more.
  const size_t shown = std::min<size_t>(series.size(), 12);
  for (size_t i = 0; i < shown; ++i) {
    const Series& s = series[i];
    const double y = top + 10 + 20.0 * static_cast<double>(i);
    out += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" y2=\"{2}\" stroke=\"{3}\" stroke-width=\"3\"{4}/>"
        "<text x=\"{5}\" y=\"{6}\" class=\"legend\">{7}</text>\n",
        left + pw + 14, left + pw + 40, y, s.colour.empty() ? series_colour(i) : s.colour,
        s.dashed ? " stroke-dasharray=\"7 4\"" : "", left + pw + 46, y + 4, escape(s.name));
  }
  if (series.size() > shown) {
    out += fmt::format("<text x=\"{}\" y=\"{}\" class=\"legend\">... {} more</text>\n", left + pw + 14,
                       top + 14 + 20.0 * static_cast<double>(shown), series.size() - shown);
  }
  return out + "</svg>\n";
}

std::string gantt(const std::vector<std::string>& lanes, const std::vector<Bar>& bars, const std::string& unit,
                  int width) {
  const double left = 150, right = 40, top = 10, lane_h = 34, bottom = 46;
  const double pw = width - left - right;
  const double height = top + lane_h * static_cast<double>(lanes.size()) + bottom;
  double end = 0;
  for (const Bar& b : bars) end = std::max(end, b.start + b.duration);
  if (end <= 0) end = 1;
  const std::vector<double> xt = ticks(0, end, 8);
  end = std::max(end, xt.back());
  const auto X = [&](double t) { return left + t / end * pw; };

  std::string out = fmt::format(
      "<svg class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" "
      "height=\"{1}\" role=\"img\" aria-label=\"timeline\">\n",
      width, height);
  for (size_t l = 0; l < lanes.size(); ++l) {
    const double y = top + lane_h * static_cast<double>(l);
    out += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>"
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"lane\">{}</text>\n",
        left, y, pw, lane_h, l % 2 ? "#f7f7f7" : "#efefef", left - 8, y + lane_h / 2 + 4, escape(lanes[l]));
  }
  const double axis_y = top + lane_h * static_cast<double>(lanes.size());
  for (const double t : xt) {
    out += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#ccc\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\" class=\"tick\">{4}</text>\n",
        X(t), top, axis_y + 5, axis_y + 19, tick_label(t));
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"axis\">time ({})</text>\n", left + pw / 2,
                     height - 6, escape(unit));
  for (const Bar& b : bars) {
    const double y = top + lane_h * static_cast<double>(b.lane);
    if (b.instant) {
      const double x = X(b.start);
      out += fmt::format(
          "<path d=\"M{0:.1f} {1:.1f} l-5 -8 h10 z\" fill=\"{2}\" stroke=\"#333\" stroke-width=\"0.6\">"
          "<title>{3} at {4} {5}</title></path>\n",
          x, y + 10, b.colour, escape(b.label), tick_label(b.start), escape(unit));
      continue;
    }
    const double x = X(b.start), w = std::max(1.0, b.duration / end * pw);
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\" stroke=\"#fff\" stroke-width=\"0.8\">"
        "<title>{}: {} to {} {}</title></rect>\n",
        x, y + 5, w, lane_h - 10, b.colour, escape(b.label), tick_label(b.start), tick_label(b.start + b.duration), escape(unit));
    if (w > 7.0 * static_cast<double>(b.label.size()) + 6) {
      out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" class=\"bar\" fill=\"{}\">{}</text>\n",
                         x + w / 2, y + lane_h / 2 + 4, text_on(b.colour), escape(b.label));
    }
  }
  return out + "</svg>\n";
}

std::string bar_chart(const std::vector<BarItem>& items, const std::string& x_label, bool log_scale, int width) {
  const double left = 230, right = 150, top = 10, bar_h = 26, bottom = 46;
  const double pw = width - left - right;
  const double height = top + bar_h * static_cast<double>(items.size()) + bottom;
  // The axis: [0, max] in round ticks, or whole decades [10^lo, 10^hi] around the positive values.
  double hi = 0, lo_dec = 0, hi_dec = 1;
  bool any = false;
  for (const BarItem& b : items) {
    if (log_scale && b.value > 0) {
      const double d = std::log10(b.value);
      lo_dec = any ? std::min(lo_dec, std::floor(d)) : std::floor(d);
      hi_dec = any ? std::max(hi_dec, std::ceil(d)) : std::ceil(d);
      any = true;
    }
    hi = std::max(hi, b.value);
  }
  if (log_scale && hi_dec <= lo_dec) hi_dec = lo_dec + 1;
  std::vector<double> xt;
  if (log_scale) {
    for (double d = lo_dec; d <= hi_dec; ++d) xt.push_back(d);
  } else {
    xt = ticks(0, hi > 0 ? hi : 1, 6);
    hi = std::max(hi, xt.back());
  }
  const auto X = [&](double v) {
    if (log_scale) return left + (std::log10(v) - lo_dec) / (hi_dec - lo_dec) * pw;
    return left + v / (hi > 0 ? hi : 1) * pw;
  };
  std::string out = fmt::format(
      "<svg class=\"chart\" viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" role=\"img\" "
      "aria-label=\"bar chart\">\n",
      width, height);
  const double axis_y = top + bar_h * static_cast<double>(items.size());
  for (const double t : xt) {
    const double x = log_scale ? left + (t - lo_dec) / (hi_dec - lo_dec) * pw : X(t);
    out += fmt::format(
        "<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#ccc\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\" class=\"tick\">{4}</text>\n",
        x, top, axis_y + 5, axis_y + 19, log_scale ? fmt::format("1e{}", static_cast<int>(t)) : tick_label(t));
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" class=\"axis\">{}</text>\n", left + pw / 2,
                     height - 6, escape(x_label));
  for (size_t i = 0; i < items.size(); ++i) {
    const BarItem& b = items[i];
    const double y = top + bar_h * static_cast<double>(i);
    const std::string colour = b.colour.empty() ? series_colour(0) : b.colour;
    const std::string text = b.text.empty() ? tick_label(b.value) : b.text;
    const double w = (log_scale ? b.value > 0 : b.value != 0) ? std::max(1.0, X(b.value) - left) : 0.0;
    out += fmt::format(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" class=\"lane\">{}</text>"
        "<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"><title>{}: {}</title></rect>"
        "<text x=\"{:.1f}\" y=\"{}\" class=\"bar\">{}</text>\n",
        left - 8, y + bar_h / 2 + 4, escape(b.label), left, y + 4, w, bar_h - 8, colour, escape(b.label), escape(text),
        left + w + 6, y + bar_h / 2 + 4, escape(text));
  }
  return out + "</svg>\n";
}

}  // namespace ddplab::svg
