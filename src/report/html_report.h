// --report FILE.html: one self-contained page (inline CSS and SVG, no script, nothing fetched) a learner
// opens from disk. Programs fill a ReportData from what they already computed; render_html() draws it.
// Every section is optional: a lab that is not DDP training fills only its tables, losses and command line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/base/compare.h"
#include "src/report/explain.h"
#include "src/report/svg.h"

namespace ddplab {
struct Timeline;
class Module;
namespace ddp {
class Reducer;
struct Config;
struct SimResult;
}  // namespace ddp

namespace report {

// The PyTorch the goldens in tests/golden/ were written with: torch.__version__ of Debian's python3-torch
// 1.13.1+dfsg, as recorded in tests/golden/rng.json ("torch_version") and tests/golden/ddp/README.md.
// Run time has no PyTorch to ask; this is the oracle every test compares against.
inline constexpr const char* kOracleTorchVersion = "1.13.0a0";

struct Row {
  CmpResult cmp;
  int64_t max_ulps = -1;  // the largest distance in units in the last place; -1 when not known
};
struct Table {
  std::string title;
  std::vector<Row> rows;
};

struct Bucket {
  std::vector<std::string> params;
  std::vector<int64_t> numels;
  int64_t numel = 0;  // floats; bytes = 4 * numel
};
struct BucketLayout {
  std::string title;
  std::vector<Bucket> buckets;
};

// Gloo's ring on a few floats, as --explain prints it (trace_ring, src/report/explain.h), with a title.
struct RingExplain : RingTrace {
  std::string title;
};

struct Timing {
  std::vector<std::string> lanes;
  std::vector<svg::Bar> bars;
  std::string summary;  // timeline_summary()
};

// One tensor of every rank against rank 0's: a BatchNorm buffer, or a Dropout layer's last training mask.
struct PerRankRow {
  std::string name;
  std::vector<CmpResult> ranks;  // ranks[k - 1]: rank k vs rank 0
};
struct PerRankTable {
  std::string title;  // which run ("" when the page shows one)
  std::vector<PerRankRow> rows;
  std::string why;  // why they agree or not: broadcast_buffers, or how the ranks were seeded
};

// A chart a program draws itself (svg::bar_chart, ...), with a heading and a sentence saying how to read it.
struct Figure {
  std::string title, hint;  // plain text
  std::string svg;          // markup from src/report/svg.h
};

struct ReportData {
  std::string program;            // "ddp_sim", "ddp_verify", "001_toy_ddp", ...
  std::string title;              // a line saying what ran
  std::vector<std::string> argv;  // the command line, as given
  std::string config;             // ddp::describe(cfg), when there is one
  std::vector<svg::Series> losses;
  std::string loss_x_label = "step (batch)";
  std::string loss_hint;  // what the lines are, when not one per rank ("" = the per-rank sentence)
  std::vector<Table> tables;
  std::vector<std::string> notes;  // the sentences the program printed under its tables, the verdict
  std::vector<BucketLayout> layouts;
  std::optional<RingExplain> ring;
  std::optional<Timing> timing;
  std::vector<std::string> transcript;  // what a lab printed, line by line
  // Models with buffers / Dropout only (src/report/per_rank.h): "buffers per rank", "Dropout masks per rank".
  std::vector<PerRankTable> buffers, masks;
  std::vector<Figure> figures;  // drawn after the loss chart, in order
};

std::string render_html(const ReportData& d);

// ---- filling it from what the programs computed -------------------------------------------------------
Row cmp_row(const std::string& name, const float* a, const float* b, int64_t n);
std::vector<Row> cmp_model_rows(const Module& a, const Module& b);  // every parameter, state_dict names
// Iteration 0's layout (one bucket, model order) and the reducer's current one, with names and sizes.
BucketLayout first_layout(const Module& model);
BucketLayout layout_of(const std::string& title, const ddp::Reducer& reducer, const Module& model);
// The inputs --explain picks from the first all-reduce (the whole bucket if small, else the last bias).
RingExplain explain_data(const ddp::Config& cfg, const std::vector<float*>& bufs, size_t n);
RingExplain ring_data(const std::string& title, const std::vector<std::vector<float>>& inputs);
Timing timing_of(const Timeline& t, int64_t world_size);
// Everything a simulation gives: per-rank loss curves (and the single device's), ddp_sim's cmp tables,
// the bucket layouts before and after the rebuild.
void add_simulation(ReportData& d, const ddp::Config& cfg, const ddp::SimResult& res);
// Loss series from a flat "[rank r] losses" list.
svg::Series loss_series(const std::string& name, const std::vector<float>& losses);

}  // namespace report
}  // namespace ddplab
