#include "notebooks_ported/lab/lab_report.h"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "src/io.h"

namespace ddplab::lab {

namespace {

std::mutex g_mutex;
std::vector<std::string>* g_lines = nullptr;  // the active report's transcript

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// One format_cmp line back into a CmpResult (numel unknown: 0).
bool parse_cmp(const std::string& line, CmpResult* out) {
  const size_t a = line.find(" | exact: "), b = line.find(" | approximate: "), c = line.find(" | maxdiff: ");
  if (a == std::string::npos || b == std::string::npos || c == std::string::npos || !(a < b && b < c)) return false;
  const std::string ex = trim(line.substr(a + 10, b - a - 10)), ap = trim(line.substr(b + 16, c - b - 16));
  if ((ex != "True" && ex != "False") || (ap != "True" && ap != "False")) return false;
  out->name = trim(line.substr(0, a));
  out->exact = ex == "True";
  out->approximate = ap == "True";
  out->maxdiff = std::strtof(line.c_str() + c + 12, nullptr);
  return true;
}

}  // namespace

void record_line(const std::string& line) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_lines) return;
  size_t start = 0;
  for (size_t nl; (nl = line.find('\n', start)) != std::string::npos; start = nl + 1) {
    g_lines->push_back(line.substr(start, nl - start));
  }
  g_lines->push_back(line.substr(start));
}

std::vector<report::Table> tables_from_lines(const std::vector<std::string>& lines) {
  std::vector<report::Table> tables;
  bool in_table = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    CmpResult row;
    if (!parse_cmp(lines[i], &row)) {
      in_table = false;
      continue;
    }
    if (!in_table) {
      std::string title = i > 0 ? trim(lines[i - 1]) : std::string("cmp");
      if (title.rfind("# ", 0) == 0) title = title.substr(2);
      if (!title.empty() && title.back() == ':') title.pop_back();
      tables.push_back({title, {}});
      in_table = true;
    }
    tables.back().rows.push_back({row, -1});
  }
  return tables;
}

LabReport::LabReport(const Flags& flags, int argc, char** argv) {
  if (!flags.has("report")) return;
  const std::string path = flags.get_string("report", "");
  if (flags.get_string("backend", "sim") != "sim") {
    throw UsageError(
        "--report is written by the simulator, where every rank's output reaches one process: use it "
        "with --backend sim");
  }
  if (std::string why = check_writable(path); !why.empty()) throw UsageError("--report: " + why);
  path_ = path;
  const std::string arg0 = argc > 0 ? argv[0] : "lab";
  program_ = arg0.substr(arg0.find_last_of('/') == std::string::npos ? 0 : arg0.find_last_of('/') + 1);
  page_.program = program_;
  page_.title = fmt::format("notebook lab {} on the simulator ({} ranks as threads of one process)", program_,
                            flags.get_string("world-size", "2"));
  page_.argv.assign(argv, argv + argc);
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_lines = &page_.transcript;
}

LabReport::~LabReport() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (g_lines == &page_.transcript) g_lines = nullptr;
}

void LabReport::add_simulation(const ddp::Config& cfg, const ddp::SimResult& sim) {
  if (!active()) return;
  page_.config = ddp::describe(cfg);
  page_.title =
      fmt::format("notebook lab {} on the simulator: {} ranks of torch DDP in one process", program_, cfg.world_size);
  for (int64_t r = 0; r < cfg.world_size; ++r) {
    std::vector<float> l;
    for (const ddp::BatchLog& b : sim.log) {
      if (b.rank == r) l.push_back(b.loss);
    }
    page_.losses.push_back(report::loss_series(fmt::format("rank {}", r), l));
  }
  const MLP& model0 = sim.replicas[0]->model;
  page_.layouts.push_back(report::first_layout(model0));
  page_.layouts.push_back(report::layout_of(fmt::format("from iteration 1: rebuilt in gradient-ready order (first "
                                                        "bucket 1 MiB, then up to --bucket-cap-mb {})",
                                                        cfg.bucket_cap_mb),
                                            *sim.replicas[0]->reducer, model0));
}

int LabReport::write() {
  if (!active()) return 0;
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    g_lines = nullptr;  // the page is complete: nothing printed later belongs to it
  }
  page_.tables = tables_from_lines(page_.transcript);
  if (!page_.tables.empty()) {
    page_.notes.push_back(
        "Rows read from the lines the lab printed in the notebook's cmp format: the number of "
        "floats, of differing elements and the distance in ulps are not known here.");
  }
  if (std::string why = write_file_atomic(path_, report::render_html(page_)); !why.empty()) {
    std::fprintf(stderr, "%s: --report: %s\n", program_.c_str(), why.c_str());
    return 1;
  }
  return 0;
}

}  // namespace ddplab::lab
