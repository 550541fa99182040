// --report FILE.html from ddp_sim, ddp_verify and the labs: one self-contained page with its sections, rows
// coloured by verdict, every string escaped, nothing fetched; bad paths refused before the work; stdout and
// dumps unchanged by it. Then a real browser (Debian's chromium-headless-shell) loads it: no console
// message, a DOM that parsed, and a screenshot that is not blank.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/png.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::CommandResult;

constexpr const char* kSim = "sim/ddp_sim";
constexpr const char* kVerify = "verify/ddp_verify";
constexpr const char* kLab001 = "notebooks_ported/001_toy_ddp/001_toy_ddp";
constexpr const char* kLab004 = "notebooks_ported/004_parallelism/004_parallelism";
constexpr const char* kLab005 = "notebooks_ported/005_cnn_digits/005_cnn_digits";

CommandResult run(const char* program, std::vector<std::string> args) {
  args.insert(args.begin(), program);
  return testing::run_command(args);
}

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string fmt_id(const char* id) { return std::string("id=\"") + id + "\""; }

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// What every page must be: an HTML5 document, self-contained, no script, balanced SVG.
void expect_self_contained(const std::string& html, const std::string& label) {
  EXPECT_EQ(html.rfind("<!DOCTYPE html>\n", 0), 0u) << label;
  EXPECT_NE(html.find("</html>"), std::string::npos) << label;
  for (const char* banned : {"http://", "https://", "<script", "<link", "<img", "<iframe", "url(", "@import"}) {
    EXPECT_EQ(html.find(banned), std::string::npos) << label << " contains " << banned;
  }
  EXPECT_EQ(count(html, "<svg"), count(html, "</svg>")) << label;
  EXPECT_NE(html.find("id=\"command\""), std::string::npos) << label;
  EXPECT_NE(html.find("PyTorch 1.13.0a0"), std::string::npos) << label << ": the oracle's version";
}

const std::vector<std::string> kSimArgs = {
    "--world-size", "3", "--compare-single-device", "true", "--layers", "6,64,2", "--lr", "0.1", "--epochs", "2"};

TEST(Report, DdpSimHasEverySectionAndEscapesArgv) {
  // A hostile file name: it is in argv, so the page shows it, escaped.
  const std::string path = testing::temp_dir() + "/r<b>&'x\".html";
  auto args = kSimArgs;
  args.insert(args.end(), {"--report", path});
  const CommandResult r = run(kSim, args);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string html = read(path);
  expect_self_contained(html, "ddp_sim");
  for (const char* id : {"loss", "cmp", "buckets", "ring", "timeline", "command"}) {
    EXPECT_NE(html.find(fmt_id(id)), std::string::npos) << "section " << id;
  }
  EXPECT_GE(count(html, "<svg"), 2u) << "the loss chart and the timeline";
  EXPECT_GE(count(html, "<polyline"), 4u) << "3 ranks and the single device";
  EXPECT_NE(html.find("one device"), std::string::npos);
  // Replica vs replica is exact; DDP vs one device is allclose only (world size 3: 1/3 rounds).
  EXPECT_NE(html.find("<tr class=\"exact\">"), std::string::npos);
  EXPECT_NE(html.find("<tr class=\"allclose\">"), std::string::npos);
  EXPECT_NE(html.find("max ulps"), std::string::npos);
  EXPECT_NE(html.find("reduce-scatter step 0"), std::string::npos);
  EXPECT_NE(html.find("layers.1.bias</code> <span class=\"hint\">(2)</span>"), std::string::npos) << "bucket contents";
  EXPECT_NE(html.find("r&lt;b&gt;&amp;"), std::string::npos) << "the file name, escaped";
  EXPECT_EQ(html.find("r<b>"), std::string::npos) << "the file name, unescaped";
  EXPECT_EQ(html.find("x\".html"), std::string::npos) << "a raw quote";
}

// Issue 19, cause 9: the loss chart kept every point: 10 epochs gave a 0.5 MB page, 300 epochs 14.7 MB.
TEST(Report, LongRunsStaySmall) {
  const std::string path = testing::temp_dir() + "/long.html";
  // 4 ranks x 51200 steps: 2.5 MB before.
  const CommandResult r = run(kSim, {"--world-size", "4", "--samples", "2048", "--batch-size", "1", "--epochs", "100",
                                     "--quiet", "--report", path});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string html = read(path);
  expect_self_contained(html, "51200 steps");
  EXPECT_LT(html.size(), 300000u) << "the page grows with the run";
  EXPECT_NE(html.find("each line shows the lowest and highest loss of every"), std::string::npos)
      << "the page does not say that the curves are thinned";
  std::printf("51200 steps, 4 ranks: a page of %zu bytes\n", html.size());
}

TEST(Report, DifferentRowsAreRed) {
  // No broadcast and per-rank seeds: the ranks never agree, rows are not even allclose.
  const std::string path = testing::temp_dir() + "/r.html";
  const CommandResult r =
      run(kSim, {"--world-size", "2", "--init", "per-rank", "--broadcast", "false", "--quiet", "--report", path});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string html = read(path);
  EXPECT_NE(html.find("<tr class=\"different\">"), std::string::npos);
  EXPECT_NE(html.find("--init per-rank"), std::string::npos) << "the sentence on why they differ";
}

TEST(Report, StdoutAndDumpUnchanged) {
  const std::string dir = testing::temp_dir();
  auto plain = kSimArgs, with = kSimArgs;
  plain.insert(plain.end(), {"--explain", "--dump-params", dir + "/a.json"});
  with.insert(with.end(), {"--explain", "--dump-params", dir + "/b.json", "--report", dir + "/r.html"});
  const CommandResult a = run(kSim, plain), b = run(kSim, with);
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(a.out, b.out) << "stdout must not depend on --report";
  EXPECT_EQ(read(dir + "/a.json"), read(dir + "/b.json")) << "the dump must not depend on --report";
}

TEST(Report, BadPathRefusedBeforeTheWork) {
  const std::string dir = testing::temp_dir();
  for (const char* program : {kSim, kVerify, kLab001}) {
    std::vector<std::string> extra;
    if (std::string(program) == kVerify) extra = {"--nproc", "2"};
    for (const std::string& bad : {std::string("/nonexistent-dir/r.html"), dir}) {
      auto args = extra;
      args.push_back("--report");
      args.push_back(bad);
      const CommandResult r = run(program, args);
      EXPECT_EQ(r.status, 2) << program << " " << bad << ": " << r.err;
      EXPECT_EQ(count(r.err, "\n"), 1u) << program << ": one line: " << r.err;
      EXPECT_NE(r.err.find("--report: "), std::string::npos) << r.err;
      EXPECT_EQ(r.out, "") << program << ": refused before any work";
    }
  }
  EXPECT_FALSE(exists("/nonexistent-dir"));
  const CommandResult r = run(kLab001, {"--backend", "gloo", "--nproc", "2", "--report", dir + "/x.html"});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--backend sim"), std::string::npos) << r.err;
  EXPECT_FALSE(exists(dir + "/x.html"));
}

TEST(Report, DdpVerifyRealRanks) {
  const std::string path = testing::temp_dir() + "/v.html";
  const CommandResult r =
      run(kVerify, {"--nproc", "3", "--epochs", "2", "--layers", "8,32,16,4", "--quiet", "--report", path});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string html = read(path);
  expect_self_contained(html, "ddp_verify");
  for (const char* id : {"loss", "cmp", "buckets", "ring", "timeline"}) {
    EXPECT_NE(html.find(fmt_id(id)), std::string::npos) << "section " << id;
  }
  EXPECT_NE(html.find("sim vs real, rank 0"), std::string::npos);
  EXPECT_NE(html.find("real rank 2 vs real rank 0"), std::string::npos);
  EXPECT_EQ(count(html, "<polyline"), 3u) << "one loss line per real rank";
  EXPECT_EQ(html.find("<tr class=\"different\">"), std::string::npos);
}

TEST(Report, Labs) {
  const std::string dir = testing::temp_dir();
  CommandResult r = run(kLab001, {"--report", dir + "/001.html"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string html = read(dir + "/001.html");
  expect_self_contained(html, "001_toy_ddp");
  for (const char* id : {"loss", "cmp", "buckets", "output"}) {
    EXPECT_NE(html.find(fmt_id(id)), std::string::npos) << "001 section " << id;
  }
  EXPECT_NE(html.find("rank 1 vs rank 0 after training"), std::string::npos);
  EXPECT_NE(html.find("Training accuracy"), std::string::npos) << "the transcript";
  // A lab that is not DDP training (run_on_ranks): its printed tables and output, no loss chart.
  r = run(kLab004, {"--report", dir + "/004.html"});
  ASSERT_EQ(r.status, 0) << r.err;
  html = read(dir + "/004.html");
  expect_self_contained(html, "004_parallelism");
  EXPECT_NE(html.find("<tr class=\"exact\">"), std::string::npos);
  EXPECT_NE(html.find(fmt_id("output")), std::string::npos);
  // Issue 27: the labs' "max ulps" column said "?". Counted now: 0 where every bit agrees, more where not.
  EXPECT_EQ(html.find("<td class=\"num\">?</td>"), std::string::npos) << "an unknown max ulps";
  size_t exact = 0, inexact = 0;
  for (size_t at = html.find("<tr class=\""); at != std::string::npos; at = html.find("<tr class=\"", at + 1)) {
    const std::string row = html.substr(at, html.find("</tr>", at) - at);
    std::vector<std::string> cells;
    for (size_t c = row.find("<td"); c != std::string::npos; c = row.find("<td", c + 1)) {
      const size_t open = row.find('>', c) + 1;
      cells.push_back(row.substr(open, row.find("</td>", open) - open));
    }
    if (cells.size() != 8) continue;  // a cmp row with counts: name, floats, verdict, exact, allclose, maxdiff, ulps
    const bool same = row.rfind("<tr class=\"exact\">", 0) == 0;
    (same ? exact : inexact)++;
    EXPECT_EQ(cells[6] == "0", same) << row;
  }
  EXPECT_GT(exact, 0u);
  EXPECT_GT(inexact, 0u) << "lab 004's DataParallel gradients are allclose only";
}

// Issue 16: "buffers per rank" and "Dropout masks per rank", for models that have buffers / Dropout only.
const std::vector<std::string> kCnnArgs = {"--dataset", "digits", "--model",      "cnn", "--loss", "ce",
                                           "--lr",      "0.05",   "--batch-size", "32",  "--quiet"};

std::string section(const std::string& html, const char* id) {
  const size_t at = html.find(fmt_id(id));
  return at == std::string::npos ? "" : html.substr(at, html.find("</section>", at) - at);
}

// One cnn run's page and its dump (--dump-params: every rank's buffers).
struct CnnRun {
  std::string html;
  testing::json dump;
};

CnnRun cnn_run(const char* program, std::vector<std::string> extra, const std::string& name) {
  const std::string path = testing::temp_dir() + "/" + name;
  auto args = kCnnArgs;
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--report", path + ".html", "--dump-params", path + ".json"});
  const CommandResult r = run(program, args);
  EXPECT_EQ(r.status, 0) << name << ": " << r.err;
  CnnRun out{read(path + ".html"), testing::load_json(path + ".json")};
  expect_self_contained(out.html, name);
  return out;
}

// The coloured cells of the row named `name` in a per-rank table ("exact<br>max |diff| 0.0", "3 of 896 differ").
std::vector<std::string> row_cells(const std::string& table, const std::string& name) {
  const size_t at = table.find("<td class=\"mono\">" + name + "</td>");
  if (at == std::string::npos) return {};
  const size_t end = table.find("</tr>", at);
  std::vector<std::string> cells;
  for (size_t p = table.find("style=\"background:", at); p < end; p = table.find("style=\"background:", p + 1)) {
    const size_t open = table.find('>', p) + 1;
    cells.push_back(table.substr(open, table.find("</td>", open) - open));
  }
  return cells;
}

// The buffers table says, for every buffer of every rank k, what the dump says of it against rank 0's: exact,
// allclose (torch.allclose's rtol 1e-5, atol 1e-8) or different, and the largest |difference| to the bit.
// Returns how many cells say "different".
size_t expect_buffers_as_dumped(const std::string& buffers, const testing::json& dump, const std::string& label) {
  const testing::json& ranks = dump["buffers"];
  EXPECT_GE(ranks.size(), 2u) << label << ": no buffers per rank in the dump";
  EXPECT_EQ(count(buffers, "<td class=\"mono\">"), ranks[0].size()) << label << ": one row per buffer";
  size_t different = 0;
  for (const auto& [name, v0] : ranks[0].items()) {
    const std::vector<std::string> cells = row_cells(buffers, name);
    EXPECT_EQ(cells.size(), ranks.size() - 1) << label << " " << name;
    const std::vector<float> b = testing::floats(v0);
    for (size_t k = 1; k < ranks.size() && k <= cells.size(); ++k) {
      const std::vector<float> a = testing::floats(ranks[k][name]);
      bool exact = a.size() == b.size(), close = exact;
      float maxdiff = 0.0f;
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        const float err = std::fabs(a[i] - b[i]);
        exact = exact && a[i] == b[i];
        close = close && (a[i] == b[i] || err <= 1e-8f + std::fabs(1e-5f * b[i]));
        maxdiff = std::max(maxdiff, err);
      }
      const std::string& cell = cells[k - 1];
      const size_t br = cell.find("<br>max |diff| ");
      EXPECT_EQ(cell.substr(0, br), exact ? "exact" : close ? "allclose" : "different") << label << " " << name;
      EXPECT_EQ(br == std::string::npos ? -1.0f : std::strtof(cell.c_str() + br + 15, nullptr), maxdiff)
          << label << " " << name << " rank " << k << ": " << cell;
      different += !close;
    }
  }
  return different;
}

// The counts of differing mask elements in a masks table, in order ("same mask" is 0).
std::vector<std::string> mask_counts(const std::string& masks) {
  std::vector<std::string> out;
  for (size_t p = masks.find("style=\"background:"); p != std::string::npos;
       p = masks.find("style=\"background:", p + 1)) {
    const size_t open = masks.find('>', p) + 1;
    const std::string cell = masks.substr(open, masks.find("</td>", open) - open);
    out.push_back(cell == "same mask" ? "0" : cell.substr(0, cell.find(' ')));
  }
  return out;
}

TEST(Report, BuffersAndMasksPerRank) {
  // DDP's defaults: every buffer as the dump has it (all rank 0's), masks drawn alike on 3 ranks.
  CnnRun run3 = cnn_run(kSim, {"--world-size", "3"}, "broadcast");
  std::string buffers = section(run3.html, "buffers"), masks = section(run3.html, "masks");
  EXPECT_EQ(expect_buffers_as_dumped(buffers, run3.dump, "broadcast"), 0u) << buffers;
  EXPECT_NE(buffers.find("broadcast_buffers=True (DDP&#39;s default)"), std::string::npos) << buffers;
  EXPECT_EQ(count(masks, ">same mask<"), 2u) << masks;
  EXPECT_NE(masks.find("Every rank called manual_seed(seed) alike"), std::string::npos) << masks;
  // No broadcast and seeds per rank: the running statistics differ, as the dump has them, and so do the masks;
  // the real ranks (ddp_verify, one process each) show the same buffers and the same mask counts.
  const std::vector<std::string> apart = {"--world-size",    "3",   "--broadcast-buffers", "false",
                                          "--seed-per-rank", "true"};
  std::vector<std::string> sim_counts;
  for (const char* program : {kSim, kVerify}) {
    std::vector<std::string> extra = apart;
    if (program == kVerify) extra.insert(extra.end(), {"--nproc", "3"});
    const std::string name = program == kSim ? "apart_sim" : "apart_verify";
    run3 = cnn_run(program, extra, name);
    buffers = section(run3.html, "buffers");
    masks = section(run3.html, "masks");
    EXPECT_GE(expect_buffers_as_dumped(buffers, run3.dump, name), 1u) << buffers;
    EXPECT_NE(buffers.find("with --broadcast-buffers false each rank&#39;s BatchNorm running statistics"),
              std::string::npos)
        << buffers;
    const std::vector<std::string> counts = mask_counts(masks);
    ASSERT_EQ(counts.size(), 2u) << masks;
    for (const std::string& c : counts) EXPECT_NE(c, "0") << name << ": ranks seeded apart drew the same mask";
    EXPECT_NE(masks.find("--seed-per-rank: each rank called manual_seed(seed + rank)"), std::string::npos) << masks;
    if (program == kSim) sim_counts = counts;
    EXPECT_EQ(counts, sim_counts) << name << ": the real ranks' masks are not the simulator's";
    std::printf("%s: mask elements differing from rank 0's: rank 1 %s, rank 2 %s (of 896)\n", name.c_str(),
                counts[0].c_str(), counts[1].c_str());
  }
  // An MLP has neither: its page is what it was before these sections existed.
  auto args = kSimArgs;
  args.insert(args.end(), {"--quiet", "--report", testing::temp_dir() + "/mlp.html"});
  ASSERT_EQ(run(kSim, args).status, 0);
  const std::string html = read(testing::temp_dir() + "/mlp.html");
  EXPECT_EQ(html.find(fmt_id("buffers")), std::string::npos);
  EXPECT_EQ(html.find(fmt_id("masks")), std::string::npos);
}

// Lab 005's page: its four runs' tables say what the lab printed (and model_ddp_test checks the printed
// verdicts and mask counts against torch's reference.py).
TEST(Report, Lab005BuffersAndMasks) {
  const std::string path = testing::temp_dir() + "/005.html";
  const CommandResult r = run(kLab005, {"--report", path});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string html = read(path);
  expect_self_contained(html, "005_cnn_digits");
  const std::string buffers = section(html, "buffers"), masks = section(html, "masks");
  const size_t no_bb = buffers.find("<h3>broadcast_buffers=False</h3>");
  ASSERT_NE(no_bb, std::string::npos) << buffers;
  EXPECT_EQ(count(buffers.substr(0, no_bb), "\">different<br>"), 0u) << "with the broadcast: " << buffers;
  // The lab's worst buffer without the broadcast, "(5.running_var maxdiff X)", is in its table.
  const std::string printed = r.out.substr(r.out.find("buffers exact: False ("));
  const size_t name_at = printed.find('(') + 1, gap = printed.find(" maxdiff ");
  const std::string worst = printed.substr(name_at, gap - name_at);
  const std::string diff = printed.substr(gap + 9, printed.find(')') - gap - 9);
  const std::vector<std::string> cells = row_cells(buffers.substr(no_bb), worst);
  ASSERT_EQ(cells.size(), 1u) << worst << ": " << buffers;
  EXPECT_EQ(cells[0], "different<br>max |diff| " + diff);
  // The masks: the lab's "N of 896 mask elements differ", seeded alike and per rank.
  std::vector<std::string> want;
  for (size_t p = r.out.find(" mask elements differ"); p != std::string::npos;
       p = r.out.find(" mask elements differ", p + 1)) {
    const size_t of = r.out.rfind(" of ", p), start = r.out.rfind(' ', of - 1) + 1;
    want.push_back(r.out.substr(start, of - start));
  }
  ASSERT_EQ(want.size(), 2u) << r.out;
  EXPECT_EQ(mask_counts(masks), want) << masks;
  EXPECT_NE(html.find(fmt_id("output")), std::string::npos) << "the transcript";
  std::printf("lab 005's page: %s %s, masks differing %s and %s of 896\n", worst.c_str(), diff.c_str(), want[0].c_str(),
              want[1].c_str());
}

// ---- the page in a real browser -------------------------------------------------------------------------

std::string browser() {
  for (const char* b : {"/usr/bin/chromium-headless-shell", "/usr/bin/chromium"}) {
    if (access(b, X_OK) == 0) return b;
  }
  return "";
}

// The browser as a test may run it: no setuid sandbox (root, Bazel's sandbox), no GPU, a profile and HOME
// under TEST_TMPDIR, /dev/shm not needed, and no name resolves, so nothing could be fetched.
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

TEST(ReportBrowser, LoadsWithoutConsoleMessagesAndRendersNonBlank) {
  const std::string bin = browser();
  if (bin.empty()) GTEST_SKIP() << "no headless Chromium (Debian's chromium-headless-shell, tools/install_deps.sh)";
  const std::string dir = testing::temp_dir(), page = dir + "/report.html", png = dir + "/report.png";
  const CommandResult r = run(kSim, {"--world-size", "4", "--layers", "64,512,256,10", "--samples", "256",
                                     "--compare-single-device", "true", "--quiet", "--report", page});
  ASSERT_EQ(r.status, 0) << r.err;

  // --dump-dom prints the DOM the browser built: the page parsed, sections and charts included. The page
  // has no script, so any CONSOLE line in the log (a parse error, a blocked load) is a failure.
  const CommandResult dom = headless(bin, dir, {"--dump-dom", "file://" + page});
  if (dom.status != 0 && dom.out.empty()) GTEST_SKIP() << "the browser cannot start here: " << dom.err;
  EXPECT_EQ(dom.status, 0) << dom.err;
  EXPECT_NE(dom.out.find("</html>"), std::string::npos);
  for (const char* id : {"loss", "cmp", "buckets", "ring", "timeline", "command"}) {
    EXPECT_NE(dom.out.find(std::string("id=\"") + id + "\""), std::string::npos) << "DOM lacks section " << id;
  }
  EXPECT_GE(count(dom.out, "<svg"), 2u);
  EXPECT_EQ(dom.err.find("CONSOLE"), std::string::npos) << dom.err;

  const CommandResult shot = headless(bin, dir, {"--screenshot=" + png, "--window-size=1200,3000", "file://" + page});
  ASSERT_EQ(shot.status, 0) << shot.err;
  EXPECT_EQ(shot.err.find("CONSOLE"), std::string::npos) << shot.err;
  const Image img = decode_png(read(png));
  ASSERT_EQ(img.width, 1200u) << "could not decode " << png;
  ASSERT_EQ(img.height, 3000u);
  std::set<uint32_t> colours(img.pixels.begin(), img.pixels.end());
  size_t ink = 0;  // pixels that are neither the page's background nor white
  for (const uint32_t p : img.pixels) ink += p != 0xffffff && p != 0xf4f5f7;
  std::printf("screenshot %s: %zu distinct colours, %.1f%% ink\n", png.c_str(), colours.size(),
              100.0 * static_cast<double>(ink) / static_cast<double>(img.pixels.size()));
  EXPECT_GT(colours.size(), 100u) << "text, tables in three colours and the charts";
  EXPECT_GT(ink, img.pixels.size() / 50) << "at least 2% of the page drawn";
  // Where the tables' colours are: exact rows' green and allclose rows' amber are on the page.
  EXPECT_TRUE(colours.count(0xe3f4e6)) << "an exact row";
  EXPECT_TRUE(colours.count(0xfff1c9)) << "an allclose row";
  // Keep it for a human to look at (bazel-testlogs/tests/report_test/test.outputs/).
  if (const char* out = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR")) {
    std::ofstream(std::string(out) + "/report.png", std::ios::binary) << read(png);
    std::ofstream(std::string(out) + "/report.html", std::ios::binary) << read(page);
  }
}

}  // namespace
}  // namespace ddplab
