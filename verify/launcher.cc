#include "verify/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "src/flags.h"

extern char** environ;

namespace ddplab::verify {
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
  e.world_size = env_int(size_var, *s);
  if (e.world_size < 1) throw UsageError(fmt::format("{} must be >= 1 (got {})", size_var, e.world_size));
  if (e.rank >= e.world_size) {
    throw UsageError(fmt::format("{}={} is not below {}={}", rank_var, e.rank, size_var, e.world_size));
  }
  e.local_rank = env(local_var) ? env_int(local_var, *env(local_var)) : e.rank;
  const char* local_size_var = e.source == "openmpi" ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "LOCAL_WORLD_SIZE";
  e.local_world_size = env(local_size_var) ? env_int(local_size_var, *env(local_size_var)) : e.world_size;
  e.master_addr = env("MASTER_ADDR").value_or("");
  e.master_port = env("MASTER_PORT").value_or("");
  return e;
}

int launch_local(int nproc, const std::vector<std::string>& args, const std::vector<std::string>& extra_env,
                 double grace_s) {
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      for (pid_t p : pids) kill(p, SIGKILL);
      return 1;
    }
    if (pid == 0) {
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
    pids.push_back(pid);
  }
  // After the first failure the others get `grace_s` to notice it themselves and name it, then SIGTERM,
  // then SIGKILL 5 s later.
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  int first_status = 0, remaining = nproc;
  using Clock = std::chrono::steady_clock;
  constexpr auto kNever = Clock::time_point::max();
  Clock::time_point term_at = kNever, kill_at = kNever;
  const auto signal_all = [&](int sig) {
    for (pid_t p : pids) {
      if (p > 0) kill(p, sig);
    }
  };
  while (remaining > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --remaining;
      int rank = 0;
      for (int r = 0; r < nproc; ++r) {
        if (pids[static_cast<size_t>(r)] == pid) rank = r;
      }
      pids[static_cast<size_t>(rank)] = -1;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 0 && first_status == 0) {
        first_status = code;
        if (remaining > 0) {
          std::fprintf(stderr, "%s: rank %d %s %d; stopping the other ranks\n", program_invocation_short_name, rank,
                       WIFEXITED(status) ? "exited with status" : "was killed by signal",
                       WIFEXITED(status) ? code : WTERMSIG(status));
          term_at = Clock::now() + grace;
        }
      }
      continue;
    }
    if (Clock::now() > term_at) {
      signal_all(SIGTERM);
      term_at = kNever;
      kill_at = Clock::now() + std::chrono::seconds(5);
    }
    if (Clock::now() > kill_at) {
      signal_all(SIGKILL);
      kill_at = kNever;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return first_status;
}

}  // namespace ddplab::verify
