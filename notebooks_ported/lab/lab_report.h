// --report FILE.html for every lab (src/report/html_report.h): what the lab printed, the cmp tables it printed
// (handed over as rows by record_table), the loss per rank and the bucket layouts when it
// trains DDP, and the command line. Written by the simulator (--backend sim), where every rank's lines
// reach this process; real ranks are refused with one line.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/ddp/config.h"
#include "src/ddp/trainer.h"
#include "src/base/flags.h"
#include "src/launch/run_flags.h"
#include "src/report/html_report.h"

namespace ddplab::lab {

class LabReport {
 public:
  // Without --report: inactive, every call does nothing. With it: refuses real ranks and a path that cannot
  // be written (UsageError, exit 2, before any work), then records every print_line and record_table until
  // destroyed.
  LabReport(const Flags& flags, const dist::RunFlags& run, int argc, char** argv);
  ~LabReport();
  LabReport(const LabReport&) = delete;
  LabReport& operator=(const LabReport&) = delete;

  bool active() const { return !path_.empty(); }
  // The page itself, for a lab that fills sections these helpers do not (nullptr when inactive).
  report::ReportData* data() { return active() ? &page_ : nullptr; }
  // A DDP simulation's loss per rank and bucket layouts.
  void add_simulation(const ddp::Config& cfg, const ddp::SimResult& sim);
  // A run's "buffers per rank" and/or "Dropout masks per rank" tables (models that have them), titled.
  void add_per_rank(const std::string& title, const ddp::Config& cfg, const ddp::SimResult& sim, bool buffers,
                    bool masks);
  // Writes the page: 0, or 1 after one line on stderr.
  int write();

 private:
  std::string path_, program_;
  report::ReportData page_;
};

// print_line's copy of every line for an active LabReport (any thread).
void record_line(const std::string& line);

// A cmp table the lab prints, as rows, for an active LabReport (any thread; nothing without --report).
void record_table(const std::string& title, const std::vector<CmpResult>& rows);

}  // namespace ddplab::lab
