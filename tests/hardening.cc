#include "tests/hardening.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

namespace ddplab::hardening {

CommandResult run(const std::vector<std::string>& env, const std::string& program,
                  const std::vector<std::string>& args) {
  std::vector<std::string> cmd = {"/usr/bin/env"};
  cmd.insert(cmd.end(), env.begin(), env.end());
  cmd.push_back(program);
  cmd.insert(cmd.end(), args.begin(), args.end());
  return testing::run_command(cmd);
}

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool wait_for(double seconds, const std::function<bool()>& ready) {
  const auto until = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (!ready()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes a store value the way a rank does: all of it or nothing (temporary file, then rename).
void write_value(const std::string& path, const std::string& value) {
  const std::string tmp = path + ".tmp.test";
  std::ofstream(tmp, std::ios::binary) << value;
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0) << path;
}

Spawned spawn(const std::vector<std::string>& env, const std::string& program, const std::vector<std::string>& args) {
  Spawned s;
  const std::string dir = testing::temp_dir();
  s.out_path = dir + "/stdout";
  s.err_path = dir + "/stderr";
  std::vector<std::string> argv = {"/usr/bin/env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(program);
  argv.insert(argv.end(), args.begin(), args.end());
  std::fflush(stdout);
  std::fflush(stderr);
  s.pid = fork();
  if (s.pid == 0) {
    if (!freopen(s.out_path.c_str(), "w", stdout) || !freopen(s.err_path.c_str(), "w", stderr)) _exit(127);
    std::vector<char*> a;
    for (const std::string& x : argv) a.push_back(const_cast<char*>(x.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  return s;
}

// Waits up to `seconds` for the program to end (then kills it): its raw wait status, or -1.
int finish(const Spawned& s, double seconds) {
  int status = 0;
  const bool ended = wait_for(seconds, [&] { return waitpid(s.pid, &status, WNOHANG) == s.pid; });
  if (ended) return status;
  kill(s.pid, SIGKILL);
  waitpid(s.pid, &status, 0);
  return -1;
}

}  // namespace ddplab::hardening
