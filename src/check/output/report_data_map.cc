// --report, picture 3: the data map.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "src/check/output/report_html_parts.h"

namespace ddplab::check::html {

// ---- 3. the data map ----------------------------------------------------------------------------------------

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

}  // namespace ddplab::check::html
