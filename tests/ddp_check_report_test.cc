// ddp_check --report's page (src/check/report_html.cc) from a CheckResult built by hand (no torch, no run):
// its three pictures (where the run first left DDP's semantics, the gradient norms, the data map) hold the
// elements the result asks for, the marker names the first problem's step, kind and rank and stands in its
// step's column, every string is escaped; then a real browser (Debian's chromium-headless-shell) builds the
// same DOM and draws the figures' colours. Without the browser that part skips with the reason, except in
// CI (CI=true), which installs it (tools/install_deps.sh).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "src/check/check.h"
#include "tests/png.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using check::CheckResult;
using check::Counts;
using check::EpochLine;
using check::Finding;
using check::StepLine;
using testing::CommandResult;

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

Counts exact(int64_t n) {
  Counts c;
  c.checked = c.exact = n;
  return c;
}

constexpr int kWs = 3;
constexpr size_t kSteps = 12;

// Three ranks, twelve steps. Rank 1's .grad differs from DDP's average at step 7 (the first problem), the
// replicas differ from there on, rank 0's parameters are only allclose at step 3, rank 2 has joined at
// step 11; an overlap of the data at step 9, a problem with no step, a note. Two epochs of data: the
// second has samples shared between ranks 0 and 1 and two repeats on rank 0, and rank 1 kept its order.
CheckResult sample() {
  CheckResult r;
  r.world_size = kWs;
  r.backend = "gloo";
  r.torch_version = "1.13.0a0";
  r.run_dir = "/tmp/run <script>alert('x')</script> & co";
  r.order = "Gloo's ring";
  r.buckets = "[fc.bias fc.weight] 40 floats";
  for (size_t i = 0; i < kSteps; ++i) {
    StepLine l;
    l.step = static_cast<int64_t>(i);
    r.steps.push_back(l.step);
    for (int k = 0; k < kWs; ++k) {
      const bool ran = !(i == 11 && k == 2);
      l.ran.push_back(ran);
      l.rank_grads.push_back(ran ? exact(2) : Counts{});
      l.rank_params.push_back(ran ? exact(2) : Counts{});
    }
    if (i == 3) l.rank_params[0] = {2, 1, 1, 0};
    if (i == 7) l.rank_grads[1] = {2, 1, 0, 1};
    l.replicas_equal = i < 7;
    r.lines.push_back(l);
    std::vector<double> local, ddp;
    for (int k = 0; k < kWs; ++k) {
      local.push_back(l.ran[static_cast<size_t>(k)] ? 2.0 + 0.3 * k + std::sin(static_cast<double>(i)) : NAN);
      ddp.push_back(l.ran[static_cast<size_t>(k)] ? 1.5 + 0.1 * static_cast<double>(i) + (k == 1 && i == 7 ? 0.7 : 0.0)
                                                  : NAN);
    }
    r.local_norm.push_back(local);
    r.ddp_norm.push_back(ddp);
  }
  r.findings = {
      {"unused-parameters", "note", "", "head.bias", "'head.bias' got no gradient", 2, -1, 0, {}},
      {"overlapping-data", "problem", "sampler", "", "step 9: 5 samples were trained on by more than one rank", 9, -1, 0, {}},
      {"grad-not-as-predicted", "problem", "", "fc.weight", "step 7, rank 1: 'fc.weight'.grad is <b>not</b> DDP's average",
       7, 1, 0, {}},
      {"optimizer-misses-parameters", "problem", "some", "", "the optimizer holds 1 of 2 parameters", -1, -1, 0, {}},
  };
  r.first_divergence.step = 7;
  r.first_divergence.rank = 1;
  r.first_divergence.title = "rank 1's .grad after backward vs DDP's predicted average";
  CmpResult a, b;
  a.name = "fc.bias", a.exact = a.approximate = true, a.numel = 4;
  b.name = "fc.weight<i>", b.maxdiff = 0.25f, b.numel = 36, b.num_different = 3;
  r.first_divergence.rows = {a, b};
  r.data.source = "sampler";
  r.data.verdict = "ranks shared up to 5 samples within an epoch (see overlapping-data)";
  for (int k = 0; k < kWs; ++k) r.data.epochs.push_back({k, 0, 0, 0, 16, 16, 0, -1});
  r.data.epochs.push_back({0, 0, 1, 8, 16, 14, 5, 1});
  r.data.epochs.push_back({1, 0, 1, 8, 16, 16, 5, 0});
  r.data.epochs.push_back({2, 0, 1, 8, 16, 16, 0, 1});
  return r;
}

// The value of attribute `name` in the tag that starts at `at`.
double attr(const std::string& html, size_t at, const std::string& name) {
  const size_t end = html.find('>', at);
  const size_t p = html.find(" " + name + "=\"", at);
  if (p == std::string::npos || p > end) return NAN;
  return std::stod(html.substr(p + name.size() + 3));
}

// The elements each figure must hold for sample(): the same in the page as written and in the DOM a
// browser built from it (which writes attributes in the same order and escapes text the same way).
void expect_figures(std::string page, const std::string& label) {
  // The page writes ' as &#39; where a browser writes it back as '.
  for (size_t p = page.find("&#39;"); p != std::string::npos; p = page.find("&#39;", p)) page.replace(p, 5, "'");
  EXPECT_EQ(count(page, "<svg"), 3u) << label;
  EXPECT_EQ(count(page, "</svg>"), 3u) << label;
  for (const char* id : {"steps-figure", "norms-figure", "data-figure", "first-problem-marker", "divergence"})
    EXPECT_EQ(count(page, std::string("id=\"") + id + "\""), 1u) << label << ": " << id;
  // 1. One cell per step for each rank and the replicas' row; a small triangle for the other problem on
  // the axis (the overlap at step 9); the marker says where and what.
  EXPECT_EQ(count(page, "class=\"cell\""), (kWs + 1) * kSteps) << label;
  EXPECT_EQ(count(page, "class=\"problem\""), 1u) << label;
  EXPECT_NE(page.find("first problem: step 7: grad-not-as-predicted (rank 1)"), std::string::npos) << label;
  EXPECT_NE(page.find("First problem at <b>step 7: grad-not-as-predicted (rank 1)</b>"), std::string::npos) << label;
  // Red where a problem lies: rank 1's .grad at step 7, and every rank at step 9 (the overlap of the data,
  // a problem of every rank's); the problem with no step colours no cell.
  EXPECT_EQ(count(page, "DIFFERENT from the prediction, or a problem found here"), 4u) << label;
  EXPECT_EQ(count(page, "a problem found here (overlapping-data/sampler)</title>"), 3u) << label;
  EXPECT_EQ(count(page, "did not take part (joined, or its trace ended)</title>"), 1u) << label;
  EXPECT_EQ(count(page, "the ranks' parameters DIFFER after the step</title>"), 5u) << label;
  // 2. DDP's .grad (rank 0's: rank 1's differs at step 7), one line per rank's own gradient, and rank 1's
  // .grad, dashed.
  EXPECT_EQ(count(page, "class=\"series\""), 5u) << label;
  EXPECT_NE(page.find("<title>rank 0's .grad after DDP</title>"), std::string::npos) << label << ": the bold line";
  EXPECT_NE(page.find("<title>rank 1's .grad after DDP</title>"), std::string::npos) << label;
  EXPECT_EQ(count(page, "class=\"problem-line\""), 1u) << label;
  // 3. Epoch 0: three bars of own samples; epoch 1: rank 0 own + shared + repeated, rank 1 own + shared,
  // rank 2 own; rank 1's SAME order.
  EXPECT_EQ(count(page, "class=\"samples\""), 9u) << label;
  EXPECT_EQ(count(page, "another rank trained on too</title>"), 2u) << label;
  EXPECT_EQ(count(page, "epoch 1, rank 0: 2 samples repeats of a sample"), 1u) << label;
  EXPECT_EQ(count(page, "SAME order as last epoch"), 1u) << label;
  // Every string from the run escaped: nothing of it became an element.
  EXPECT_EQ(page.find("<script"), std::string::npos) << label;
  EXPECT_EQ(page.find("<b>not</b>"), std::string::npos) << label;
  EXPECT_EQ(page.find("<i>"), std::string::npos) << label;
  EXPECT_NE(page.find("&lt;script&gt;alert("), std::string::npos) << label;
  EXPECT_NE(page.find("&lt;b&gt;not&lt;/b&gt;"), std::string::npos) << label;
  // The marker stands in step 7's column: inside the one cell where rank 1 is DIFFERENT.
  const size_t cell = page.rfind("<rect", page.find("step 7, rank 1: DIFFERENT"));
  const size_t marker = page.find("<line", page.find("id=\"first-problem-marker\""));
  ASSERT_NE(cell, std::string::npos) << label;
  ASSERT_NE(marker, std::string::npos) << label;
  const double x = attr(page, marker, "x1"), x0 = attr(page, cell, "x"), w = attr(page, cell, "width");
  EXPECT_GT(x, x0) << label;
  EXPECT_LT(x, x0 + w) << label;
}

TEST(DdpCheckReport, FiguresHoldWhatTheResultSays) {
  const std::string page = check::format_html(sample());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>\n", 0), 0u);
  for (const char* banned : {"http://", "https://", "<link", "<img", "<iframe", "url(", "@import"})
    EXPECT_EQ(page.find(banned), std::string::npos) << banned;
  expect_figures(page, "the page");
  // The existing tables: the findings, the cmp rows at the first divergence, one row per step and rank.
  EXPECT_NE(page.find("optimizer-misses-parameters/some"), std::string::npos);
  EXPECT_NE(page.find("fc.weight&lt;i&gt;</td><td>False</td><td>False</td><td>0.25</td><td>3 of 36</td>"),
            std::string::npos);
  EXPECT_EQ(count(page, "<tr class=ok><td>") + count(page, "<tr class=bad><td>"), kWs * kSteps);
}

TEST(DdpCheckReport, CleanRunAndNoIndices) {
  CheckResult r = sample();
  r.findings.clear();
  r.first_divergence = {};
  for (StepLine& l : r.lines) {
    l.replicas_equal = true;
    for (Counts& c : l.rank_grads) c = exact(c.checked);
    for (Counts& c : l.rank_params) c = exact(c.checked);
  }
  r.ddp_norm = std::vector<std::vector<double>>(kSteps, std::vector<double>(kWs, 1.5));
  r.data = {};
  r.data.source = "fingerprints";
  const std::string page = check::format_html(r);
  EXPECT_EQ(count(page, "<svg"), 2u) << "no data map without indices";
  EXPECT_EQ(page.find("first-problem-marker"), std::string::npos);
  EXPECT_EQ(page.find("class=\"problem"), std::string::npos);
  EXPECT_EQ(count(page, "class=\"series\""), 4u) << "DDP's line and the three ranks'";
  EXPECT_NE(page.find("<title>DDP&#39;s .grad (averaged)</title>"), std::string::npos);
  EXPECT_NE(page.find("No problem: every recorded step of every rank did what DDP's semantics say."), std::string::npos);
  EXPECT_NE(page.find("No sample indices were recorded (data source: fingerprints)"), std::string::npos);
  EXPECT_EQ(count(page, "DIFFERENT"), 0u);

  // Nothing recorded at all: a page, no figure.
  const std::string empty = check::format_html(CheckResult{});
  EXPECT_EQ(count(empty, "<svg"), 0u);
  EXPECT_NE(empty.find("No gradient was recorded"), std::string::npos);
  EXPECT_NE(empty.find("</html>"), std::string::npos);
}

// The strip's key stays inside its figure: with the whole-run entry (six, wider than the 960-px figure) it wraps
// onto a second row and the figure grows by it; every word's end (7.5 px a character at its 12-px font, more than
// it takes) lies within the figure's width, every row within its height.
TEST(DdpCheckReport, StripKeyStaysInsideTheFigure) {
  for (const bool whole : {false, true}) {
    CheckResult r = sample();
    r.step_exact = false;  // the longest wording of "close"
    for (StepLine& l : r.lines) l.whole_run = whole;
    const std::string page = check::format_html(r);
    const size_t fig = page.find("<svg id=\"steps-figure\"");
    ASSERT_NE(fig, std::string::npos);
    const std::string svg = page.substr(fig, page.find("</svg>", fig) - fig);
    double width = 0, height = 0;
    ASSERT_EQ(std::sscanf(svg.c_str() + svg.find("viewBox=\"") + 9, "0 0 %lf %lf", &width, &height), 2);
    size_t words = 0, rows_seen = 0;
    double last_y = -1;
    for (size_t at = svg.find("class=\"legend\">"); at != std::string::npos; at = svg.find("class=\"legend\">", at + 1)) {
      const size_t tag = svg.rfind("<text x=\"", at);
      double x = 0, y = 0;
      ASSERT_EQ(std::sscanf(svg.c_str() + tag, "<text x=\"%lf\" y=\"%lf\"", &x, &y), 2);
      const size_t begin = at + 15, end = svg.find("</text>", begin);
      const double chars = static_cast<double>(end - begin);
      EXPECT_LE(x + 7.5 * chars, width) << svg.substr(begin, end - begin) << (whole ? " (whole run)" : "");
      EXPECT_LE(y + 4, height);
      rows_seen += y != last_y && y > last_y;
      last_y = std::max(last_y, y);
      ++words;
    }
    EXPECT_EQ(words, whole ? 6u : 5u);
    EXPECT_EQ(rows_seen, whole ? 2u : 1u);
  }
}

// A finding that repeats lists its steps on the page (the first 20, then how many more), as --json lists them all.
TEST(DdpCheckReport, RepeatingFindingListsItsSteps) {
  CheckResult r = sample();
  r.findings = {{"grads-changed-before-step", "note", "one-factor", "0.weight", "step 3, rank 0: .grad was scaled", 3, 0,
                 25, {}},
                {"unused-parameters", "note", "", "head.bias", "'head.bias' got no gradient", 2, -1, 1, {9}}};
  for (int64_t s = 4; s < 29; ++s) r.findings[0].repeat_steps.push_back(s);
  const std::string page = check::format_html(r);
  EXPECT_NE(page.find("again at steps 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23 and 5 more"),
            std::string::npos);
  EXPECT_NE(page.find("again at step 9</small>"), std::string::npos);
  EXPECT_EQ(count(page, "class=repeats"), 2u);
}

// Under accumulation the whole-run steps keep no norm of a rank's own gradient: the page says from which step the
// ranks' lines stop, where they do, and nothing where they go on.
TEST(DdpCheckReport, NormLinesThatStopAreExplained) {
  CheckResult r = sample();
  EXPECT_EQ(check::format_html(r).find("the ranks' own lines stop"), std::string::npos);
  for (size_t i = 5; i < r.lines.size(); ++i) {
    r.lines[i].whole_run = true;
    for (double& v : r.local_norm[i]) v = NAN;
  }
  const std::string page = check::format_html(r);
  EXPECT_NE(page.find("From step " + std::to_string(r.lines[5].step) + " the ranks&#39; own lines stop"), std::string::npos)
      << page.substr(page.find("id=\"norms\""), 2000);
}

// A run whose arithmetic is exact but that trains nothing is red throughout, not green; a run whose optimizer
// step is compared allclose (pip's torch: MKL's sqrt) says in the legend and the hint why amber is expected.
TEST(DdpCheckReport, NothingTrainsIsRedAndExpectedAmberIsExplained) {
  CheckResult r = sample();
  r.findings = {{"nothing-trains", "problem", "zero-gradients", "", "every gradient is exactly 0", -1, -1, 0, {}}};
  r.first_divergence = {};
  for (StepLine& l : r.lines) l.replicas_equal = true;
  std::string page = check::format_html(r);
  EXPECT_EQ(count(page, "a problem found here (nothing-trains/zero-gradients)</title>"), static_cast<size_t>(kWs) * kSteps - 1)
      << "every cell but the joined rank's";
  EXPECT_EQ(count(page, "rank 0: exactly as predicted</title>"), 0u);
  EXPECT_EQ(page.find("close (expected: see below)"), std::string::npos);
  r.findings.clear();
  r.step_exact = false;
  r.step_why = "Adam's sqrt is MKL's, not IEEE's: compared allclose";
  page = check::format_html(r);
  EXPECT_NE(page.find("close (expected: see below)"), std::string::npos);
  EXPECT_NE(page.find("Amber is expected in this run: the optimizer step is compared allclose, not bit for bit "
                      "(Adam&#39;s sqrt is MKL&#39;s"),
            std::string::npos);
}

TEST(DdpCheckReport, LongRunStaysSmall) {
  // 20000 steps of 4 ranks: at most 240 columns in the strip, at most 1000 points a line.
  CheckResult r;
  r.world_size = 4;
  for (int64_t i = 0; i < 20000; ++i) {
    StepLine l;
    l.step = i;
    l.ran.assign(4, true);
    l.rank_grads.assign(4, exact(3));
    l.rank_params.assign(4, exact(3));
    if (i == 12345) l.rank_params[2] = {3, 2, 0, 1};
    r.lines.push_back(l);
    r.local_norm.push_back({1.0 + std::sin(i * 0.01), 1.1, 1.2, 1.3});
    r.ddp_norm.push_back({1.0, 1.0, 1.0, 1.0});
  }
  r.findings = {{"step-not-as-predicted", "problem", "", "w", "step 12345, rank 2", 12345, 2, 0, {}}};
  const std::string page = check::format_html(r);
  EXPECT_LE(count(page, "class=\"cell\""), 5u * 240);
  EXPECT_GE(count(page, "class=\"cell\""), 5u * 200);
  EXPECT_EQ(count(page, "DIFFERENT from the prediction, or a problem found here"), 1u) << "the worst of its column";
  EXPECT_NE(page.find("first problem: step 12345: step-not-as-predicted (rank 2)"), std::string::npos);
  for (size_t p = page.find("class=\"series\""); p != std::string::npos; p = page.find("class=\"series\"", p + 1)) {
    const size_t d = page.find(" d=\"", p), end = page.find('"', d + 4);
    EXPECT_LE(count(page.substr(d, end - d), "L"), 1000u);
  }
  std::printf("a page of 20000 steps and 4 ranks: %zu bytes\n", page.size());
  EXPECT_LT(page.size(), 1u << 20);
  EXPECT_EQ(count(page, "<tr class=bad><td>"), 1u) << "the per-step table: only the row that is not exact";
  EXPECT_NE(page.find("80000 rows, 1 of them not all exact: those shown"), std::string::npos);
}

// ---- the page in a real browser -------------------------------------------------------------------------
// browser(), headless() and decode_png() as in tests/report_test.cc.

std::string browser() {
  for (const char* b : {"/usr/bin/chromium-headless-shell", "/usr/bin/chromium"}) {
    if (access(b, X_OK) == 0) return b;
  }
  return "";
}

// No setuid sandbox (root, Bazel's sandbox), no GPU, a profile and HOME under TEST_TMPDIR, and no name
// resolves, so nothing could be fetched.
CommandResult headless(const std::string& bin, const std::string& dir, std::vector<std::string> args) {
  std::vector<std::string> argv = {"/usr/bin/env",
                                   "HOME=" + dir,
                                   "XDG_CONFIG_HOME=" + dir,
                                   "XDG_CACHE_HOME=" + dir,
                                   bin,
                                   "--headless",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--disable-dev-shm-usage",
                                   "--no-first-run",
                                   "--host-resolver-rules=MAP * ~NOTFOUND",
                                   "--user-data-dir=" + dir + "/profile",
                                   "--enable-logging=stderr",
                                   "--v=0"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::run_command(argv);
}

using testing::Image;
using testing::decode_png;

// Skips with the reason, or fails in CI, which installs the browser.
#define SKIP_OR_FAIL_IN_CI(why)                                                     \
  do {                                                                              \
    const char* ci = std::getenv("CI");                                             \
    if (ci && std::string(ci) == "true") FAIL() << "CI must open the page: " << why; \
    GTEST_SKIP() << why;                                                            \
  } while (0)

TEST(DdpCheckReportBrowser, ShowsTheThreeFigures) {
  const std::string bin = browser();
  if (bin.empty()) SKIP_OR_FAIL_IN_CI("no headless Chromium (Debian's chromium-headless-shell, tools/install_deps.sh)");
  const std::string dir = testing::temp_dir(), page = dir + "/report.html", png = dir + "/report.png";
  const std::string html = check::format_html(sample());
  std::ofstream(page, std::ios::binary) << html;

  // The DOM the browser built holds the same figures, elements and text: the page parsed as written. It
  // has no script, so any CONSOLE line in the log (a parse error, a blocked load) is a failure.
  const CommandResult dom = headless(bin, dir, {"--dump-dom", "file://" + page});
  if (dom.status != 0 && dom.out.empty()) SKIP_OR_FAIL_IN_CI("the browser cannot start here: " + dom.err);
  EXPECT_EQ(dom.status, 0) << dom.err;
  EXPECT_NE(dom.out.find("</html>"), std::string::npos);
  expect_figures(dom.out, "the browser's DOM");
  EXPECT_EQ(dom.err.find("CONSOLE"), std::string::npos) << dom.err;

  // What it drew: every fill of the three figures, and the marker's line standing in a red cell.
  const CommandResult shot = headless(bin, dir, {"--screenshot=" + png, "--window-size=1100,2600", "file://" + page});
  ASSERT_EQ(shot.status, 0) << shot.err;
  EXPECT_EQ(shot.err.find("CONSOLE"), std::string::npos) << shot.err;
  const Image img = decode_png(read(png));
  ASSERT_EQ(img.width, 1100u) << "could not decode " << png;
  ASSERT_EQ(img.height, 2600u);
  std::map<uint32_t, size_t> n;
  for (const uint32_t p : img.pixels) ++n[p];
  const std::map<uint32_t, const char*> fills = {
      {0xbfe6c6, "exact cells"},       {0xffe08a, "the allclose cell"}, {0xf4a9a1, "different cells"},
      {0xc9ccd1, "the joined cell"},   {0xc00000, "the marker"},        {0x0072b2, "own samples"},
      {0xd55e00, "shared samples"},    {0xf0e442, "repeated samples"}};
  for (const auto& [colour, what] : fills) {
    std::printf("%-18s #%06x: %zu pixels\n", what, colour, n[colour]);
    EXPECT_GT(n[colour], 60u) << what << " (#" << std::hex << colour << ") not drawn";
  }
  // The marker's line: the longest vertical run of its colour, across the four rows; in rank 1's row (the
  // second quarter of the run) a red (different) cell on both sides of it: step 7's, the only red one there.
  uint32_t best_x = 0, best_len = 0, best_end = 0;
  for (uint32_t x = 0; x < img.width; ++x) {
    uint32_t run = 0;
    for (uint32_t y = 0; y < img.height; ++y) {
      run = img.at(x, y) == 0xc00000 ? run + 1 : 0;
      if (run > best_len) best_x = x, best_len = run, best_end = y;
    }
  }
  std::printf("the marker: x %u, %u pixels tall\n", best_x, best_len);
  EXPECT_GT(best_len, 80u) << "across the four rows";
  bool left = false, right = false;
  const uint32_t top = best_end + 1 - best_len, quarter = best_len / 4;
  for (uint32_t y = top + quarter + quarter / 4; y < top + 2 * quarter - quarter / 4; ++y)
    for (uint32_t d = 3; d <= 12 && best_x >= d && best_x + d < img.width; ++d) {
      left = left || img.at(best_x - d, y) == 0xf4a9a1;
      right = right || img.at(best_x + d, y) == 0xf4a9a1;
    }
  EXPECT_TRUE(left && right) << "the marker is not on step 7's red cell of rank 1";
  if (const char* out = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR")) {
    std::ofstream(std::string(out) + "/ddp_check_report.png", std::ios::binary) << read(png);
    std::ofstream(std::string(out) + "/ddp_check_report.html", std::ios::binary) << html;
  }
}

}  // namespace
}  // namespace ddplab
