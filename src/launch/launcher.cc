#include "src/launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "src/ddp/config.h"
#include "src/base/flags.h"
#include "src/launch/rank_stderr.h"
#include "src/store/store.h"

extern char** environ;

namespace ddplab::dist {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

int env_int(const char* name, const std::string& text) {
  const int64_t v = parse_int(name, text);
  if (v < 0 || v > (1 << 20)) throw UsageError(fmt::format("{} must be a non-negative integer (got '{}')", name, text));
  return static_cast<int>(v);
}

}  // namespace

std::optional<RankEnv> rank_from_env() {
  RankEnv e;
  const char* rank_var = nullptr;
  const char* size_var = nullptr;
  const char* local_var = nullptr;
  if (env("RANK") || env("WORLD_SIZE")) {
    e.source = env("DDPLAB_LAUNCHER") ? "ddp_verify" : "torchrun";
    rank_var = "RANK", size_var = "WORLD_SIZE", local_var = "LOCAL_RANK";
  } else if (env("OMPI_COMM_WORLD_RANK") || env("OMPI_COMM_WORLD_SIZE")) {
    e.source = "openmpi";
    rank_var = "OMPI_COMM_WORLD_RANK", size_var = "OMPI_COMM_WORLD_SIZE", local_var = "OMPI_COMM_WORLD_LOCAL_RANK";
  } else {
    return std::nullopt;
  }
  const auto r = env(rank_var), s = env(size_var);
  if (!r) throw UsageError(fmt::format("{} is set but {} is not", size_var, rank_var));
  if (!s) throw UsageError(fmt::format("{} is set but {} is not", rank_var, size_var));
  e.rank = env_int(rank_var, *r);
  const int64_t ws = parse_int(size_var, *s);
  if (ws < 1 || ws > ddp::kMaxWorldSize) {  // the limit --nproc has
    throw UsageError(fmt::format("{} must be in [1, {}] (got {})", size_var, ddp::kMaxWorldSize, ws));
  }
  e.world_size = static_cast<int>(ws);
  if (e.rank >= e.world_size) {
    throw UsageError(fmt::format("{}={} is not below {}={}", rank_var, e.rank, size_var, e.world_size));
  }
  e.local_rank = env(local_var) ? env_int(local_var, *env(local_var)) : e.rank;
  const char* local_size_var = e.source == "openmpi" ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "LOCAL_WORLD_SIZE";
  e.local_world_size = env(local_size_var) ? env_int(local_size_var, *env(local_size_var)) : e.world_size;
  if (e.local_world_size < 1 || e.local_world_size > e.world_size) {
    throw UsageError(
        fmt::format("{} must be in [1, {}={}] (got {})", local_size_var, size_var, e.world_size, e.local_world_size));
  }
  e.master_addr = env("MASTER_ADDR").value_or("");
  e.master_port = env("MASTER_PORT").value_or("");
  return e;
}

namespace {

volatile sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }
constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP};

// The launcher's handlers for SIGTERM/SIGINT/SIGHUP while ranks run (a signal the caller ignores, as
// nohup ignores SIGHUP, stays ignored); restored by the destructor.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < std::size(kStopSignals); ++i) {
      sigaction(kStopSignals[i], nullptr, &old_[i]);
      if (old_[i].sa_handler != SIG_IGN) sigaction(kStopSignals[i], &sa, nullptr);
    }
  }
  ~StopSignals() {
    for (size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &old_[i], nullptr);
  }
  // In a child before exec: the caller's dispositions (exec would reset handlers to default anyway).
  void restore_in_child() const {
    for (size_t i = 0; i < std::size(kStopSignals); ++i) {
      signal(kStopSignals[i], old_[i].sa_handler == SIG_IGN ? SIG_IGN : SIG_DFL);
    }
  }

 private:
  struct sigaction old_[std::size(kStopSignals)]{};
};

// A process that outlives a launcher killed with SIGKILL just long enough to remove its directory: it
// blocks on a pipe only the launcher writes to, and the kernel closes that pipe however the launcher ends.
pid_t start_watchdog(const std::string& dir, int* write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  const pid_t pid = fork();
  if (pid != 0) {
    close(fds[0]);
    if (pid < 0) {
      close(fds[1]);
      return -1;
    }
    *write_end = fds[1];
    return pid;
  }
  close(fds[1]);
  for (int sig : kStopSignals) signal(sig, SIG_IGN);  // it ends when the launcher does, not before
  if (const int null = open("/dev/null", O_RDWR); null >= 0) {
    dup2(null, 0), dup2(null, 1), dup2(null, 2);
    if (null > 2) close(null);
  }
  char c;
  while (read(fds[0], &c, 1) < 0 && errno == EINTR) {
  }
  // The ranks die with the launcher (PR_SET_PDEATHSIG); one may still be writing a key for a moment.
  for (int i = 0; i < 100; ++i) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (!std::filesystem::exists(dir, ec)) break;
    usleep(20000);
  }
  _exit(0);
}

// Stopped by a signal (state T in /proc/PID/stat; the name in parentheses may hold anything).
bool is_stopped(pid_t pid) {
  char buf[512];
  const int fd = open(fmt::format("/proc/{}/stat", pid).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');
  return close_paren && close_paren[1] == ' ' && close_paren[2] == 'T';
}

}  // namespace

int launch_local(int nproc, const std::vector<std::string>& args, std::vector<std::string> extra_env, double grace_s,
                 bool fresh_store_dir) {
  const StopSignals stop_signals;  // from here on an interrupted launcher stops its ranks and cleans up
  std::string dir;
  int watchdog_pipe = -1;
  pid_t watchdog = -1;
  if (fresh_store_dir) {
    const char* base = std::getenv("TMPDIR");
    dir = std::string(base && *base ? base : "/tmp") + "/ddplab_ranks.XXXXXX";
    if (!mkdtemp(dir.data())) {
      throw SetupError(fmt::format("cannot create a rendezvous directory {}: {}", dir, std::strerror(errno)));
    }
    extra_env.push_back("DDPLAB_STORE=file:" + dir);
    watchdog = start_watchdog(dir, &watchdog_pipe);
  }
  const pid_t launcher = getpid();
  // The ranks' stderr through the launcher; a progress line, drawn only on a terminal, still is.
  RankStderr rank_stderr(nproc);
  const bool progress_on_terminal = isatty(2) && !std::getenv("DDPLAB_PROGRESS");
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc && g_stop_signal == 0; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "%s: fork: %s\n", program_invocation_short_name, std::strerror(errno));
      g_stop_signal = SIGTERM;  // stop those already started, clean up, status 1
      break;
    }
    if (pid == 0) {
      // Die with the launcher, even by SIGKILL. If it died before this line, nobody would send the signal.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(1);
      stop_signals.restore_in_child();
      rank_stderr.in_child(r);
      if (progress_on_terminal) setenv("DDPLAB_PROGRESS", "1", 1);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("DDPLAB_LAUNCHER", "1", 1);
      for (const std::string& kv : extra_env) putenv(const_cast<char*>(kv.c_str()));
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      std::perror("exec");
      _exit(127);
    }
    rank_stderr.in_launcher(r);
    pids.push_back(pid);
  }
  // After the first failure the others get `grace_s` to notice it themselves and name it, then SIGTERM,
  // then SIGKILL 5 s later.
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  int first_status = 0, remaining = static_cast<int>(pids.size());
  int interrupted = 0;
  using Clock = std::chrono::steady_clock;
  constexpr auto kNever = Clock::time_point::max();
  Clock::time_point term_at = kNever, kill_at = kNever;
  // A stopped rank (SIGSTOP, a debugger) keeps SIGTERM pending until it runs again: continue it too.
  const auto signal_all = [&](int sig) {
    for (pid_t p : pids) {
      if (p > 0) kill(p, sig);
      if (p > 0 && sig != SIGKILL) kill(p, SIGCONT);
    }
  };
  // The grace is for ranks that can still say what they saw; a stopped rank cannot.
  const auto all_stopped = [&] {
    for (pid_t p : pids) {
      if (p > 0 && !is_stopped(p)) return false;
    }
    return true;
  };
  bool signalled_by_us = false;  // from here on, a rank's death by SIGTERM/SIGKILL is the launcher's doing
  const auto say = [&](int rank, bool exited, int raw, bool stopping) {
    std::fprintf(stderr, "%s: rank %d %s%s\n", program_invocation_short_name, rank,
                 exited ? fmt::format("exited with status {}", raw).c_str()
                        : fmt::format("was killed by signal {} ({})", raw, strsignal(raw)).c_str(),
                 stopping ? "; stopping the other ranks" : "");
  };
  while (remaining > 0) {
    if (g_stop_signal != 0 && interrupted == 0) {
      interrupted = g_stop_signal;
      std::fprintf(stderr, "%s: interrupted by signal %d (%s): stopping %d rank%s\n", program_invocation_short_name,
                   interrupted, strsignal(interrupted), remaining, remaining > 1 ? "s" : "");
      signal_all(interrupted == SIGHUP ? SIGTERM : interrupted);
      signalled_by_us = true;
      term_at = kNever;
      kill_at = Clock::now() + std::chrono::seconds(5);
    }
    // Every rank that has ended by now, in one sweep: waitpid(-1) hands zombies back in fork order, so a
    // rank 0 that exited 1 because rank 1 was SIGKILLed came back first, and the launcher blamed rank 0.
    struct Ended {
      int rank, raw;
      bool exited, said_why;
    };
    std::vector<Ended> batch;
    pid_t pid = 0;
    int status = 0;
    while (remaining > 0 && (pid = waitpid(-1, &status, WNOHANG)) > 0) {
      if (pid == watchdog) {  // it ended early (it should not): nothing left to remove the directory later
        watchdog = -1;
        continue;
      }
      int rank = -1;
      for (int r = 0; r < static_cast<int>(pids.size()); ++r) {
        if (pids[static_cast<size_t>(r)] == pid) rank = r;
      }
      if (rank < 0) continue;
      --remaining;
      pids[static_cast<size_t>(rank)] = -1;
      const bool exited = WIFEXITED(status);
      const int raw = exited ? WEXITSTATUS(status) : WTERMSIG(status);
      batch.push_back({rank, raw, exited, rank_stderr.ended(rank, exited ? raw : -1)});
    }
    if (!batch.empty()) {
      if (interrupted != 0) continue;  // stopped by the forwarded signal: not a failure of their own
      // The cause: a rank killed by a signal (its peers exit 1 only because it vanished), else the first
      // failure reaped. The promise is 0/1/2/3: a death by signal, or another status, is a failure: 1.
      const Ended* cause = nullptr;
      for (const Ended& e : batch) {
        const bool failed = !e.exited || e.raw != 0;
        if (failed && (!cause || (!e.exited && cause->exited))) cause = &e;
      }
      for (const Ended& e : batch) {
        if (&e == cause && first_status == 0) {
          first_status = e.exited && e.raw <= 3 ? e.raw : 1;
          // A rank that ended on bad input or a failed rendezvous (2, 3) has said why: that is the line.
          const bool told = e.said_why && e.exited && (e.raw == 2 || e.raw == 3);
          if (!told && (remaining > 0 || !e.exited || e.raw > 3)) say(e.rank, e.exited, e.raw, remaining > 0);
          if (remaining > 0) term_at = Clock::now() + grace;
        } else if (!e.exited && !signalled_by_us) {
          say(e.rank, false, e.raw, false);  // a death by a signal of someone else's is always said
        }
      }
      continue;
    }
    if (pid < 0 && errno == ECHILD) break;
    if (term_at != kNever && all_stopped()) term_at = Clock::now();
    if (Clock::now() >= term_at) {
      signal_all(SIGTERM);
      signalled_by_us = true;
      term_at = kNever;
      kill_at = Clock::now() + std::chrono::seconds(5);
    }
    if (Clock::now() > kill_at) {
      signal_all(SIGKILL);
      signalled_by_us = true;
      kill_at = kNever;
    }
    rank_stderr.pump(20);
  }
  if (!dir.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  if (watchdog_pipe >= 0) close(watchdog_pipe);  // the watchdog finds the directory gone and exits
  if (watchdog > 0) waitpid(watchdog, nullptr, 0);
  return interrupted != 0 ? 1 : first_status;
}

}  // namespace ddplab::dist
