// Waiting with a deadline: what the store, its Redis client and the Gloo backend's view of it share.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace ddplab::dist {

using Clock = std::chrono::steady_clock;

// Time left until `deadline`, never negative.
inline std::chrono::milliseconds left(Clock::time_point deadline) {
  using std::chrono::milliseconds;
  return std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

// Polls `ready` every 10 ms until it says yes (true) or the deadline passes (false).
template <typename F>
bool poll_until(Clock::time_point deadline, F ready) {
  for (;;) {
    if (ready()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace ddplab::dist
