// rank<r>/steps.log: the whole-run steps a rank appended, one record each (verify/ddplab_trace/writer.py).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "src/check/trace/trace.h"
#include "src/check/trace/trace_json.h"

namespace ddplab::check {

using trace_json::fail;

namespace {

constexpr uint64_t kFrameBytes = 16;

uint64_t le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

void read_steps_log(const std::string& rank_dir, Manifest* m) {
  const std::string path = rank_dir + "/steps.log";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // no whole-run step (or none appended yet)
  if (!S_ISREG(st.st_mode)) fail(path, "is not a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  const auto size = static_cast<uint64_t>(st.st_size);
  m->log_path = path;
  uint64_t at = 0;
  int64_t last = -1;
  while (size - at >= kFrameBytes) {
    unsigned char frame[kFrameBytes];
    if (::pread(fd, frame, kFrameBytes, static_cast<off_t>(at)) != static_cast<ssize_t>(kFrameBytes)) break;
    const uint64_t bytes = le64(frame), step = le64(frame + 8);
    if (bytes > size - at - kFrameBytes) break;  // the last record, cut short
    if (step > static_cast<uint64_t>(kMaxSteps) || static_cast<int64_t>(step) <= last) {
      ::close(fd);
      fail(path, fmt::format("the record at byte {} is of step {}, after step {}: steps.log holds ascending steps "
                             "up to {}", at, step, last, kMaxSteps));
    }
    last = static_cast<int64_t>(step);
    m->log[last] = safetensors::Range{at + kFrameBytes, bytes};
    at += kFrameBytes + bytes;
  }
  ::close(fd);
  if (m->complete) return;
  const int64_t listed = m->steps.empty() ? -1 : m->steps.back();
  for (auto it = m->log.upper_bound(listed); it != m->log.end(); ++it) m->steps.push_back(it->first);
}

}  // namespace ddplab::check
