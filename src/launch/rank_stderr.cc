#include "src/launch/rank_stderr.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace ddplab::dist {
namespace {

void say(const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = write(2, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

constexpr const char* kErase = "\r\033[K";  // src/base/progress.cc redraws its line with this

}  // namespace

RankStderr::RankStderr(int nproc) : pipes_(static_cast<size_t>(nproc)) {
  prefix_ = std::string(program_invocation_short_name) + ": ";
  for (Pipe& p : pipes_) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) continue;  // that rank writes to the launcher's stderr directly
    p.read_fd = fds[0], p.write_fd = fds[1];
  }
}

RankStderr::~RankStderr() {
  for (Pipe& p : pipes_) {
    if (p.read_fd >= 0) close(p.read_fd);
    if (p.write_fd >= 0) close(p.write_fd);
  }
}

void RankStderr::in_child(int r) {
  const Pipe& p = pipes_[static_cast<size_t>(r)];
  if (p.write_fd >= 0) dup2(p.write_fd, 2);  // the copy on 2 survives exec; the pipes' own ends do not
}

void RankStderr::in_launcher(int r) {
  Pipe& p = pipes_[static_cast<size_t>(r)];
  if (p.write_fd >= 0) close(p.write_fd);
  p.write_fd = -1;
  if (p.read_fd >= 0) fcntl(p.read_fd, F_SETFL, fcntl(p.read_fd, F_GETFL) | O_NONBLOCK);
}

void RankStderr::pump(int ms) {
  std::vector<pollfd> fds;
  std::vector<Pipe*> of;
  for (Pipe& p : pipes_) {
    if (p.read_fd >= 0 && p.write_fd < 0) fds.push_back({p.read_fd, POLLIN, 0}), of.push_back(&p);
  }
  if (fds.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return;
  }
  if (poll(fds.data(), fds.size(), ms) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0) drain(*of[i]);
  }
}

void RankStderr::drain(Pipe& p) {
  char buf[65536];
  while (p.read_fd >= 0) {
    const ssize_t n = read(p.read_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // EAGAIN: nothing more for now
    if (n == 0) {       // the rank has closed its stderr (it exited)
      close(p.read_fd);
      p.read_fd = -1;
      if (!p.partial.empty()) line(p, p.partial + "\n");
      p.partial.clear();
      return;
    }
    take(p, buf, static_cast<size_t>(n));
  }
}

void RankStderr::take(Pipe& p, const char* data, size_t n) {
  p.partial.append(data, n);
  for (size_t nl; (nl = p.partial.find('\n')) != std::string::npos;) {
    std::string l = p.partial.substr(0, nl + 1);
    p.partial.erase(0, nl + 1);
    line(p, std::move(l));
  }
  if (!p.partial.empty() && p.partial[0] == '\r') {  // a progress line being redrawn: show it now
    say(p.partial);
    p.partial.clear();
  }
}

void RankStderr::line(Pipe& p, std::string l) {
  const std::string erase = kErase;
  size_t lead = 0;
  while (l.compare(lead, erase.size(), erase) == 0) lead += erase.size();
  if (lead > 0) {
    say(l.substr(0, lead));
    l.erase(0, lead);
  }
  if (l.compare(0, prefix_.size(), prefix_) == 0) {
    p.held.push_back(std::move(l));
  } else {
    say(l);
  }
}

bool RankStderr::ended(int r, int status) {
  Pipe& p = pipes_[static_cast<size_t>(r)];
  drain(p);
  const bool said_why = !p.held.empty();
  for (const std::string& l : p.held) {
    // "<program>: rank 3: X" and "<program>: rank 0: X" are one failure; the first rank's words stand.
    std::string key = l;
    const std::string rank = prefix_ + "rank ";
    if (key.compare(0, rank.size(), rank) == 0) {
      const size_t digits = key.find_first_not_of("0123456789", rank.size());
      if (digits != std::string::npos && digits > rank.size() && key.compare(digits, 2, ": ") == 0)
        key = prefix_ + key.substr(digits + 2);
    }
    // With --nproc every rank has the same flags, store and machine: a rank that ends on bad input, a
    // failed rendezvous or a missing backend (2, 3) says what every rank meets, or a consequence of it
    // (a peer that never joined). The first such line is the run's; the others would repeat it.
    const bool shared = status == 2 || status == 3;
    const bool fresh = said_.insert(key).second;
    if (!shared || (fresh && !shared_said_)) say(l);
    if (shared) shared_said_ = true;
  }
  p.held.clear();
  return said_why;
}

}  // namespace ddplab::dist
