// A benchmark's child processes: run one whole, its stdout kept, its time and peak memory measured.
#pragma once

#include <string>
#include <vector>

namespace ddplab::bench {

struct Proc {
  int status = -1;
  double seconds = 0;   // wall
  double cpu_s = 0;     // user + system, of the process and the children it waited for
  long max_rss_kb = 0;
  std::string out;
};

// Runs argv; stdout to a pipe (kept) or /dev/null; stderr passes through.
Proc spawn(const std::vector<std::string>& argv, bool keep_stdout);

double median(std::vector<double> v);

}  // namespace ddplab::bench
