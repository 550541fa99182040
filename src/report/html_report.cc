#include "src/report/html_report.h"

#include <algorithm>

#include <fmt/format.h>

#include "src/base/flags.h"
#include "src/report/per_rank.h"

namespace ddplab::report {

namespace {

using svg::escape;

constexpr const char* kStyle = R"(
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d1d1f;
background:#f4f5f7;margin:0}
main{max-width:1040px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:26px;margin:0 0 4px}h2{font-size:19px;margin:0 0 8px}h3{font-size:15px;margin:14px 0 6px}
.sub{color:#555;margin:0 0 16px}
section{background:#fff;border:1px solid #dcdfe4;border-radius:8px;padding:16px 20px;margin:16px 0}
p.hint{color:#555;margin:4px 0 10px}
table{border-collapse:collapse;font-size:13.5px;margin:6px 0}
th,td{border:1px solid #d6d9de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eef0f3}
td.num{text-align:right;font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace}
code,pre,.mono{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px}
pre{background:#f6f7f9;border:1px solid #e2e4e8;border-radius:6px;padding:8px 10px;white-space:pre-wrap;
word-break:break-all;margin:6px 0}
tr.exact td{background:#e3f4e6}tr.allclose td{background:#fff1c9}tr.different td{background:#fbd9d6}
.key{display:inline-block;width:13px;height:13px;border-radius:3px;vertical-align:-2px;margin-right:5px;
border:1px solid #888}
.key.exact{background:#bfe6c6}.key.allclose{background:#ffe08a}.key.different{background:#f4a9a1}
.legend{display:flex;gap:22px;flex-wrap:wrap;margin:6px 0}.legend div{max-width:310px;font-size:13.5px}
.bar{display:inline-block;height:11px;background:#0072B2;border-radius:2px;vertical-align:middle}
td.rs{background:#e8f1fb}td.ag{background:#eef7ee}td.diff{background:#fbd9d6;font-weight:bold}
svg.chart{max-width:100%;height:auto;display:block}
svg text.tick{font-size:12px;fill:#333}svg text.axis{font-size:13px;fill:#111;font-weight:600}
svg text.legend{font-size:13px;fill:#111}svg text.lane{font-size:13px;fill:#111}
svg text.bar{font-size:11px}
footer{color:#666;font-size:12.5px}
p.why{background:#f2f6fc;border-left:4px solid #0072B2;padding:8px 12px;margin:10px 0}
summary{cursor:pointer;color:#0b5394;margin:6px 0}
)";

std::string shell_quote(const std::string& a) {
  if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,+@%") ==
                        std::string::npos) {
    return a;
  }
  std::string q = "'";
  for (const char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

const char* row_class(const CmpResult& c) { return c.exact ? "exact" : c.approximate ? "allclose" : "different"; }

std::string values(const std::vector<float>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.9g}", i ? " " : "", v[i]);
  return s;
}

std::string legend() {
  return R"(<div class="legend">
<div><span class="key exact"></span><b>exact</b>: every element has the same bits (<code>torch.all(a == b)</code>).
DDP promises this between ranks.</div>
<div><span class="key allclose"></span><b>allclose</b>: not bitwise equal, but each element within
<code>1e-8 + 1e-5·|b|</code> (<code>torch.allclose</code>): the same sums added in another order.</div>
<div><span class="key different"></span><b>different</b>: not even allclose: a real difference (other
weights, other data, a bug).</div>
</div>
<p class="hint"><b>maxdiff</b> is the largest |a − b|; <b>ulps</b> counts it in units in the last place of a float32
(1 ulp = the two numbers are neighbouring floats).</p>
)";
}

std::string cmp_table(const Table& t) {
  // Rows read back from printed lines (the labs) know only the verdicts and maxdiff: no count columns.
  const bool counted = std::any_of(t.rows.begin(), t.rows.end(), [](const Row& r) { return r.cmp.numel > 0; });
  std::string out = fmt::format(
      "<h3>{}</h3>\n<table><tr><th>parameter</th>{}<th>verdict</th><th>exact</th>"
      "<th>allclose</th><th>maxdiff</th>{}</tr>\n",
      escape(t.title), counted ? "<th>floats</th>" : "",
      counted ? "<th>max ulps</th><th>elements whose bits differ</th>" : "");
  for (const Row& r : t.rows) {
    const CmpResult& c = r.cmp;
    out += fmt::format("<tr class=\"{0}\"><td class=\"mono\">{1}</td>", row_class(c), escape(c.name));
    if (counted) out += fmt::format("<td class=\"num\">{}</td>", c.numel);
    out +=
        fmt::format("<td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td>", row_class(c),
                    c.exact ? "True" : "False", c.approximate ? "True" : "False", escape(python_float_repr(c.maxdiff)));
    if (counted) {
      out += fmt::format("<td class=\"num\">{}</td><td class=\"num\">{} of {}</td>",
                         r.max_ulps < 0 ? std::string("?") : std::to_string(r.max_ulps), c.num_different, c.numel);
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

// A note: its prose as paragraphs; when it holds the printed cmp lines too, the whole text folded below.
std::string note(const std::string& text) {
  std::string out, prose, line;
  bool tables = false;
  const auto flush = [&] {
    if (!prose.empty()) out += "<p class=\"why\">" + escape(prose) + "</p>\n";
    prose.clear();
  };
  for (size_t start = 0; start < text.size();) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    line = text.substr(start, nl - start);
    start = nl + 1;
    if (line.find(" | exact: ") != std::string::npos || line.rfind("# ", 0) == 0) {
      tables = true;
      flush();
    } else if (line.empty()) {
      flush();
    } else {
      prose += (prose.empty() ? "" : " ") + line;
    }
  }
  flush();
  if (tables) {
    out += "<details><summary>the same, as the program printed it</summary><pre>" + escape(text) + "</pre></details>\n";
  }
  return out;
}

std::string layouts(const std::vector<BucketLayout>& ls) {
  int64_t biggest = 1;
  for (const auto& l : ls) {
    for (const auto& b : l.buckets) biggest = std::max(biggest, b.numel);
  }
  std::string out;
  for (const BucketLayout& l : ls) {
    out += fmt::format(
        "<h3>{}</h3>\n<table><tr><th>bucket</th><th>parameters (in bucket order)</th><th>floats</th>"
        "<th>bytes</th><th style=\"width:220px\">size</th></tr>\n",
        escape(l.title));
    for (size_t j = 0; j < l.buckets.size(); ++j) {
      const Bucket& b = l.buckets[j];
      std::string names;
      for (size_t i = 0; i < b.params.size(); ++i) {
        names += fmt::format("{}<code>{}</code> <span class=\"hint\">({})</span>", i ? ", " : "", escape(b.params[i]),
                             b.numels[i]);
      }
      out += fmt::format(
          "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
          "<td><span class=\"bar\" style=\"width:{:.0f}px\"></span></td></tr>\n",
          j, names, b.numel, 4 * b.numel, std::max(2.0, 210.0 * static_cast<double>(b.numel) / biggest));
    }
    out += "</table>\n";
  }
  return out;
}

std::string ring(const RingExplain& x) {
  const size_t N = x.inputs.size(), n = x.ring.size();
  std::string out = fmt::format(
      "<p class=\"hint\">Gloo's ring, as <code>--explain</code> shows it (whatever <code>--allreduce</code> says). "
      "{}. Gloo cuts it into {} chunks:",
      escape(x.title), N);
  for (size_t k = 0; k < N; ++k) {
    out += fmt::format(" rank {} owns [{}, {}){}", k, x.chunk_begin[k], x.chunk_end[k], k + 1 < N ? "," : ".");
  }
  out +=
      " In the <b>reduce-scatter</b> (blue) each rank <b>adds</b> the chunk it receives to its own; in the "
      "<b>all-gather</b> (green) it <b>copies</b> the finished chunk.</p>\n<table><tr><th>step</th>";
  for (size_t r = 0; r < N; ++r) out += fmt::format("<th>rank {}</th>", r);
  out += "</tr>\n<tr><td>inputs</td>";
  for (size_t r = 0; r < N; ++r) out += fmt::format("<td class=\"mono\">{}</td>", values(x.inputs[r]));
  out += "</tr>\n";
  // One row per step of each phase: the cell of the rank that receives says from whom, which chunk, and
  // what it now holds there.
  size_t i = 0;
  while (i < x.steps.size()) {
    const bool rs = x.steps[i].reduce_scatter;
    const size_t step = x.steps[i].step;
    std::vector<std::string> cells(N);
    for (; i < x.steps.size() && x.steps[i].reduce_scatter == rs && x.steps[i].step == step; ++i) {
      const RingStep& s = x.steps[i];
      cells[s.to] = fmt::format("<td class=\"{} mono\">{} chunk {} [{},{}) from rank {}:<br>{}</td>", rs ? "rs" : "ag",
                                rs ? "+ added" : "= copied", s.chunk, s.begin, s.end, s.from, values(s.held));
    }
    out += fmt::format("<tr><td>{} step {}</td>", rs ? "reduce-scatter" : "all-gather", step);
    for (const std::string& c : cells) out += c.empty() ? "<td></td>" : c;
    out += "</tr>\n";
  }
  out +=
      "</table>\n<h3>The ring's result vs the rank-order sum ((x0 + x1) + x2 ...)</h3>\n<table><tr><th>element"
      "</th><th>ring</th><th>rank order</th><th>ulps apart</th></tr>\n";
  int64_t first = -1;
  for (size_t e = 0; e < n; ++e) {
    const bool d = x.ulps[e] != 0;
    if (d && first < 0) first = static_cast<int64_t>(e);
    out += fmt::format(
        "<tr class=\"{}\"><td class=\"num\">{}</td><td class=\"num\">{:.9g}</td><td class=\"num\">"
        "{:.9g}</td><td class=\"num\">{}</td></tr>\n",
        d ? "allclose" : "exact", e, x.ring[e], x.rank_order[e], x.ulps[e]);
  }
  out += "</table>\n";
  out += first < 0 ? "<p>Every element is bitwise equal: with these values the other addition order happened to round "
                     "the same way.</p>\n"
                   : fmt::format(
                         "<p>The bits first change at element {} ({} ulp): the same numbers summed in another "
                         "order. Float addition rounds after every step, so (a + b) + c and a + (b + c) can "
                         "differ in the last bit: <i>exact: False, approximate: True</i>.</p>\n",
                         first, x.ulps[static_cast<size_t>(first)]);
  return out;
}

std::string timing(const Timing& t) {
  std::string out =
      "<p class=\"hint\">The alpha-beta model behind <code>--trace</code>: every rank runs the same schedule, so rank "
      "0 is drawn. A ring all-reduce costs 2(N−1)·α + 2(N−1)/N · bytes / bandwidth. Iteration 0 has one bucket, "
      "ready only when backward ends; from iteration 1, when the rebuild gives several buckets (a model over 1 MiB, "
      "see <code>--bucket-cap-mb</code>), the first ones are all-reduced while backward still runs.</p>\n";
  out += "<div class=\"legend\">";
  for (const auto& [colour, what] : std::vector<std::pair<const char*, const char*>>{{"#56B4E9", "forward"},
                                                                                     {"#0072B2", "backward"},
                                                                                     {"#E69F00", "all-reduce"},
                                                                                     {"#D55E00", "bucket ready"},
                                                                                     {"#8c8c8c", "optimizer step"}}) {
    out += fmt::format("<div><span class=\"key\" style=\"background:{}\"></span>{}</div>", colour, what);
  }
  return out + "</div>\n" + svg::gantt(t.lanes, t.bars, "µs") + "<pre>" + escape(t.summary) + "</pre>\n";
}

}  // namespace

std::string render_html(const ReportData& d) {
  std::string cmdline;
  for (size_t i = 0; i < d.argv.size(); ++i) cmdline += (i ? " " : "") + shell_quote(hide_passwords(d.argv[i]));
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" "
      "content=\"width=device-width, initial-scale=1\">\n<title>{0} report</title>\n<style>{1}</style>\n</head>\n"
      "<body>\n<main>\n<h1>{0}: lab report</h1>\n<p class=\"sub\">{2}</p>\n",
      escape(d.program), kStyle, escape(d.title));
  if (!d.config.empty()) out += fmt::format("<p class=\"sub mono\">{}</p>\n", escape(d.config));
  if (!d.losses.empty()) {
    out += d.loss_hint.empty()
               ? "<section id=\"loss\"><h2>Loss per rank, step by step</h2>\n<p class=\"hint\">Each rank trains on its "
                 "own shard, so its losses differ; after every all-reduce all ranks hold the same weights."
               : "<section id=\"loss\"><h2>Loss, step by step</h2>\n<p class=\"hint\">" + escape(d.loss_hint);
    for (const auto& s : d.losses) {
      if (s.dashed) {
        out +=
            " The dashed line is one device trained on the union of the shards: the loss DDP's mean gradient "
            "stands for.";
        break;
      }
    }
    size_t steps = 0;
    for (const auto& s : d.losses) steps = std::max(steps, s.y.size());
    if (steps > svg::kMaxChartPoints) {
      out += fmt::format(
          " The run has {} steps: each line shows the lowest and highest loss of every {} consecutive steps, so "
          "that the page stays small.",
          steps, (steps + svg::kMaxChartPoints / 2 - 1) / (svg::kMaxChartPoints / 2));
    }
    out += "</p>\n" + svg::line_chart(d.losses, d.loss_x_label, "loss") + "</section>\n";
  }
  for (const Figure& f : d.figures) {
    out += fmt::format("<section class=\"figure\"><h2>{}</h2>\n<p class=\"hint\">{}</p>\n{}</section>\n",
                       escape(f.title), escape(f.hint), f.svg);
  }
  if (!d.tables.empty()) {
    out += "<section id=\"cmp\"><h2>Comparisons (the notebook's cmp)</h2>\n" + legend();
    for (const Table& t : d.tables) out += cmp_table(t);
    for (const std::string& n : d.notes) out += note(n);
    out += "</section>\n";
  } else if (!d.notes.empty()) {
    out += "<section id=\"notes\"><h2>Notes</h2>\n";
    for (const std::string& n : d.notes) out += note(n);
    out += "</section>\n";
  }
  out += per_rank_html(d);
  if (!d.layouts.empty()) {
    out +=
        "<section id=\"buckets\"><h2>Gradient buckets, before and after the rebuild</h2>\n<p class=\"hint\">DDP "
        "all-reduces gradients bucket by bucket. Iteration 0 cannot know the order in which gradients become "
        "ready, so it uses one bucket; after it, the Reducer rebuilds the buckets in gradient-ready order (last "
        "layer first), so the first bucket can be sent while backward is still computing the rest.</p>\n" +
        layouts(d.layouts) + "</section>\n";
  }
  if (d.ring) {
    out += "<section id=\"ring\"><h2>The ring all-reduce, step by step</h2>\n" + ring(*d.ring) + "</section>\n";
  }
  if (d.timing) {
    out += "<section id=\"timeline\"><h2>Timeline of iterations 0 and 1</h2>\n" + timing(*d.timing) + "</section>\n";
  }
  if (!d.transcript.empty()) {
    std::string text;
    for (const std::string& l : d.transcript) text += l + "\n";
    out += "<section id=\"output\"><h2>What the program printed</h2>\n<pre>" + escape(text) + "</pre></section>\n";
  }
  out += fmt::format(
      "<section id=\"command\"><h2>How this was made</h2>\n<p>Command line:</p>\n<pre>{}</pre>\n<p>Oracle: "
      "PyTorch {} (<code>torch.__version__</code> of Debian's python3-torch 1.13.1, which wrote the goldens in "
      "<code>tests/golden/</code>; recorded there, not asked at run time).</p>\n</section>\n",
      escape(cmdline), escape(kOracleTorchVersion));
  return out +
         "<footer>Written by ddplab's --report: one file, no scripts, nothing loaded from elsewhere.</footer>\n"
         "</main>\n</body>\n</html>\n";
}

}  // namespace ddplab::report
