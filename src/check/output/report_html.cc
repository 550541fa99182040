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
#include "src/check/output/report_html_parts.h"

namespace ddplab::check {

using namespace html;  // NOLINT: the page's parts, in this file only

namespace {

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
  out += fmt::format("<p class=\"sub\">Addition order: {}.<br>{}: <code>{}</code>{}</p>\n", esc(r.order),
                     r.sharded ? "Sharding" : "Buckets from iteration 1", esc(r.buckets),
                     r.step_exact ? "" : "<br>Optimizer step: " + esc(r.step_why));

  // 1. Where the run first left DDP's (FSDP's) semantics.
  const char* who = r.sharded ? "FSDP" : "DDP";
  out += fmt::format("<section id=\"first-problem\"><h2>Where the run first left {}'s semantics</h2>\n", who);
  // Each sentence is its FSDP or DDP opening, then the tail both share (a ternary binds only its own literals).
  out += r.sharded
             ? "<p class=\"hint\">One row per rank and one column per step: green where the rank's shards of .grad after "
               "the reduce-scatter and its shards after optimizer.step() are exactly what FSDP's arithmetic predicts "
               "from the ranks' own unsharded gradients, "
             : "<p class=\"hint\">One row per rank and one column per step: green where the rank's .grad after backward and "
               "its parameters after optimizer.step() are exactly what DDP's arithmetic predicts from the ranks' own "
               "gradients, ";
  out += "amber where close but not bit for bit, red where they differ or a problem was found at that step (a run that "
         "trains nothing is red throughout), grey where the rank took no part. ";
  out += r.sharded ? "The bottom row, shards, is green where every rank's shards were changed by its own optimizer "
                     "step alone (under FSDP each rank holds its own shards: there are no replicas to compare); "
                   : "The bottom row says whether all ranks held the same parameters after the step; ";
  out += "the red marker stands at the first step with a problem (other problems are small triangles: hover for the "
         "message).";
  if (!r.step_exact)
    out += " Amber is expected in this run: the optimizer step is compared allclose, not bit for bit (" +
           esc(r.step_why) + ").";
  if (r.sampled.steps)
    out += fmt::format(" Pale green: a whole-run step (the recorder's first steps are replayed whole, the later ones "
                       "kept as digests, a sample and weighted sums): every rank's digests equal to the others', its "
                       "sample of {} values in all replayed, {} exactly, and {} of {} all-reduced .grad tensors within "
                       "the rounding their additions allow.",
                       r.sampled.values, r.sampled.exact, r.wsum.within, r.wsum.tensors);
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
    out += fmt::format("<p class=\"clean\">No problem: every recorded step of every rank did what {}'s semantics say.</p>\n", who);
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
    out += fmt::format("<p>None: every rank did what {}'s semantics say.</p>\n", who);
  } else {
    out += "<table><tr><th class=l>severity</th><th class=l>kind</th><th class=l>where</th><th class=l>what</th></tr>\n";
    for (const Finding& f : r.findings) {
      // A finding that repeats: the steps it repeats at (the first 20 here; --json lists them all).
      std::string again;
      for (size_t k = 0; k < f.repeat_steps.size() && k < 20; ++k)
        again += fmt::format("{}{}", k ? ", " : "", f.repeat_steps[k]);
      if (!again.empty())
        again = fmt::format("<br><small class=repeats>again at step{} {}{}</small>", f.repeat_steps.size() == 1 ? "" : "s",
                            again, f.repeats > 20 ? fmt::format(" and {} more", f.repeats - 20) : std::string());
      out += fmt::format("<tr class={}><td class=l>{}</td><td class=l>{}</td><td class=l>{}</td><td class=l>{}{}</td></tr>\n",
                         f.severity == "problem" ? "bad" : "note", esc(f.severity), esc(kind_cause(f)), esc(where(f)),
                         esc(f.message), again);
    }
    out += "</table>\n";
  }
  out += "</section>\n";

  // 2. The gradient norms.
  std::string note;
  const std::string norms = norm_chart(r, problem, &note);
  out += fmt::format("<section id=\"norms\"><h2>Gradient norms: each rank's own gradient against {}'s average</h2>\n",
                     who);
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
      if (l.whole_run) {
        out += fmt::format("<tr class={}><td>{}</td><td>{}</td><td colspan=6>whole run: digests compared across ranks, "
                           "the sample replayed</td><td>{}</td></tr>\n",
                           l.replicas_equal ? "ok" : "bad", l.step, k, l.replicas_equal ? "equal" : "differ");
        continue;
      }
      out += fmt::format("<tr class={}><td>{}</td><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}/{}</td>"
                         "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
                         l.replicas_equal && !g.different && !p.different ? "ok" : "bad", l.step, k, g.exact,
                         g.checked, g.allclose, g.different, p.exact, p.checked, p.allclose, p.different,
                         r.sharded ? "sharded" : l.replicas_equal ? "equal" : "differ");
    }
  }
  out += "</table>\n";
  out += shown > 64 ? "</details>\n" : "";
  out += "</section>\n</main></body></html>\n";
  return out;
}

}  // namespace ddplab::check
