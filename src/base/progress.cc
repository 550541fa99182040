#include "src/base/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace ddplab {

Progress::Progress(const char* what, int64_t total) : what_(what), total_(total) {
  const char* env = std::getenv("DDPLAB_PROGRESS");
  forced_ = env && std::strcmp(env, "1") == 0;
  const bool off = env && std::strcmp(env, "0") == 0;
  on_ = total > 0 && (forced_ || (!off && isatty(2)));
  start_ = last_ = std::chrono::steady_clock::now();
}

Progress::~Progress() {
  if (shown_) std::fputs("\r\033[K", stderr);  // erase the line: what follows starts clean
}

std::string Progress::line(const char* what, int64_t done, int64_t total, double elapsed) {
  std::string s = fmt::format("{} {}/{} ({}%), {:.1f} s elapsed", what, done, total, done * 100 / total, elapsed);
  if (done > 0 && done < total) s += fmt::format(", about {:.0f} s left", elapsed / done * (total - done));
  return s;
}

void Progress::advance(int64_t done) {
  if (!on_) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (!forced_ && (elapsed < 2.0 || (now - last_ < std::chrono::milliseconds(500) && done < total_))) return;
  last_ = now;
  shown_ = true;
  const std::string l = "\r\033[K" + line(what_, done, total_, elapsed);
  std::fwrite(l.data(), 1, l.size(), stderr);
  std::fflush(stderr);
}

}  // namespace ddplab
