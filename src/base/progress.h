// Progress of a long run on stderr, only when stderr is a terminal (never in pipes, logs or dumps):
// "step 120/400 (30%), 12.0 s elapsed, about 28 s left", redrawn in place at most twice a second, shown
// only once a run has taken 2 s, erased when it ends.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ddplab {

class Progress {
 public:
  // `what` names the unit ("step"); total <= 0 turns it off. DDPLAB_PROGRESS=0 turns it off, =1 forces
  // it on from the first unit, every unit (for tests).
  Progress(const char* what, int64_t total);
  ~Progress();
  void advance(int64_t done);  // `done` units of `total` are finished

  // The line for `done` of `total` after `elapsed` seconds (no carriage return), e.g. for tests.
  static std::string line(const char* what, int64_t done, int64_t total, double elapsed);

 private:
  const char* what_;
  int64_t total_;
  bool on_ = false, forced_ = false, shown_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace ddplab
