// --report's "buffers per rank" and "Dropout masks per rank": every rank's BatchNorm buffers and its Dropout
// layers' last training masks against rank 0's, and why they agree or not (DDP's broadcast_buffers; ranks
// seeded alike or with --seed-per-rank). Only models with buffers / Dropout get them, so an MLP's page is
// unchanged.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "src/ddp/config.h"
#include "src/report/html_report.h"

namespace ddplab {
class Module;
namespace report {

// A model's tensors by name, as floats.
struct NamedTensors {
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;
};
// buffers() in registration order, state_dict names; num_batches_tracked (an int64) as one float, as the
// cmp tables compare it.
NamedTensors buffer_values(const Module& model);
// Each Dropout child's last training mask (0 or 1/(1-p)), named "model[i]: Dropout(p=..., inplace=False)".
NamedTensors dropout_masks(const Module& model);

// The tables from every rank's tensors (ranks[0] is rank 0's); nullopt when there is nothing to show (no
// buffers / no Dropout, or one rank).
std::optional<PerRankTable> buffers_table(const ddp::Config& cfg, const std::string& title,
                                          const std::vector<NamedTensors>& ranks);
std::optional<PerRankTable> masks_table(const ddp::Config& cfg, const std::string& title,
                                        const std::vector<NamedTensors>& ranks);
// Both, from the models of one run (the simulator's replicas), appended to `d`.
void add_per_rank(ReportData& d, const ddp::Config& cfg, const std::string& title,
                  const std::vector<const Module*>& ranks);

// The two sections' HTML: "" when the page has neither.
std::string per_rank_html(const ReportData& d);

}  // namespace report
}  // namespace ddplab
