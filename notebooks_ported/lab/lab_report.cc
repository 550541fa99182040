#include "notebooks_ported/lab/lab_report.h"

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "src/base/io.h"
#include "src/report/per_rank.h"

namespace ddplab::lab {

namespace {

std::mutex g_mutex;
report::ReportData* g_page = nullptr;  // the active report: its transcript and tables

}  // namespace

void record_line(const std::string& line) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_page) return;
  size_t start = 0;
  for (size_t nl; (nl = line.find('\n', start)) != std::string::npos; start = nl + 1) {
    g_page->transcript.push_back(line.substr(start, nl - start));
  }
  g_page->transcript.push_back(line.substr(start));
}

void record_table(const std::string& title, const std::vector<CmpResult>& rows) {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_page) return;
  report::Table t{title, {}};
  for (const CmpResult& r : rows) t.rows.push_back({r, r.max_ulps});  // cmp() counted the ulps
  g_page->tables.push_back(std::move(t));
}

LabReport::LabReport(const Flags& flags, const dist::RunFlags& run, int argc, char** argv) {
  if (!flags.has("report")) return;
  const std::string path = flags.get_string("report", "");
  if (run.real()) {
    throw UsageError(
        fmt::format("--report is written by the simulator, where every rank's output reaches one process: use it "
                    "with --backend {}",
                    dist::backend_name(dist::Backend::sim)));
  }
  if (std::string why = check_writable(path); !why.empty()) throw UsageError("--report: " + why);
  path_ = path;
  const std::string arg0 = argc > 0 ? argv[0] : "lab";
  program_ = arg0.substr(arg0.find_last_of('/') == std::string::npos ? 0 : arg0.find_last_of('/') + 1);
  page_.program = program_;
  page_.title = fmt::format("notebook lab {} on the simulator ({} ranks as threads of one process)", program_,
                            run.world_size != 0 ? run.world_size : 2);
  page_.argv.assign(argv, argv + argc);
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_page = &page_;
}

LabReport::~LabReport() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  if (g_page == &page_) g_page = nullptr;
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
  const Module& model0 = sim.replicas[0]->model;
  page_.layouts.push_back(report::first_layout(model0));
  page_.layouts.push_back(report::layout_of(fmt::format("from iteration 1: rebuilt in gradient-ready order (first "
                                                        "bucket 1 MiB, then up to --bucket-cap-mb {})",
                                                        cfg.bucket_cap_mb),
                                            *sim.replicas[0]->reducer, model0));
}

void LabReport::add_per_rank(const std::string& title, const ddp::Config& cfg, const ddp::SimResult& sim, bool buffers,
                             bool masks) {
  if (!active()) return;
  report::ReportData run;
  std::vector<const Module*> models;
  for (const auto& rep : sim.replicas) models.push_back(&rep->model);
  report::add_per_rank(run, cfg, title, models);
  if (buffers) page_.buffers.insert(page_.buffers.end(), run.buffers.begin(), run.buffers.end());
  if (masks) page_.masks.insert(page_.masks.end(), run.masks.begin(), run.masks.end());
}

int LabReport::write() {
  if (!active()) return 0;
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    g_page = nullptr;  // the page is complete: nothing printed later belongs to it
  }
  if (!page_.tables.empty()) {
    page_.notes.push_back(
        "The labs' tables show what the lab printed (exact, allclose, maxdiff) and, from the same tensors, the "
        "largest distance in ulps.");
  }
  if (std::string why = write_file_atomic(path_, report::render_html(page_)); !why.empty()) {
    std::fprintf(stderr, "%s: --report: %s\n", program_.c_str(), why.c_str());
    return 1;
  }
  return 0;
}

}  // namespace ddplab::lab
