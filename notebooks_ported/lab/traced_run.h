// Labs that run a real PyTorch script traced by verify/ddplab_trace and check it with ddp_check's library
// (lab 004's Lightning section, lab 008): the script's run and the checker's verdict as text.
#pragma once

#include <string>
#include <vector>

#include "src/check/check.h"

namespace ddplab::lab {

struct TracedRun {
  int status = -1;          // the script's exit status
  std::string out;          // its stdout
  std::string dir;          // a fresh temporary directory; the trace is dir + "/run" (removed by the destructor)
  std::string run_dir() const { return dir + "/run"; }
  ~TracedRun();
};

// The interpreter of tools/install_deps.sh --with-torch2's virtual environment ($DDPLAB_TORCH2_VENV).
std::string torch2_python();

// Runs `python script args... --out RUN_DIR` (stderr discarded). "" in *why when it ran; else why it could
// not start (the interpreter or the script absent).
void run_traced(const std::string& python, const std::string& script, const std::vector<std::string>& args,
                TracedRun* run, std::string* why);

// The checker on the run: its result, or throws TraceError (the run left no readable trace).
check::CheckResult check_traced(const TracedRun& run);

}  // namespace ddplab::lab
