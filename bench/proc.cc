#include "bench/proc.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "src/base/errors.h"

namespace ddplab::bench {

Proc spawn(const std::vector<std::string>& argv, bool keep_stdout) {
  int fds[2];
  if (keep_stdout && pipe(fds) != 0) throw RunError("pipe failed");
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) throw RunError("fork failed");
  if (pid == 0) {
    if (keep_stdout) {
      dup2(fds[1], 1);
      close(fds[0]);
    } else {
      FILE* null = std::freopen("/dev/null", "w", stdout);
      (void)null;
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  Proc p;
  if (keep_stdout) {
    close(fds[1]);
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) p.out.append(buf, static_cast<size_t>(n));
    close(fds[0]);
  }
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  p.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
            static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  p.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  p.max_rss_kb = ru.ru_maxrss;
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace ddplab::bench
