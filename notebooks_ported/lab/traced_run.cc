#include "notebooks_ported/lab/traced_run.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace ddplab::lab {

TracedRun::~TracedRun() {
  std::error_code ec;
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
}

std::string torch2_python() {
  const char* env = std::getenv("DDPLAB_TORCH2_VENV");
  return std::string(env && *env ? env : "/opt/ddplab-torch2") + "/bin/python";
}

void run_traced(const std::string& python, const std::string& script, const std::vector<std::string>& args,
                TracedRun* run, std::string* why) {
  why->clear();
  if (access(python.c_str(), X_OK) != 0) {
    *why = python + " is absent";
    return;
  }
  if (access(script.c_str(), R_OK) != 0) {
    *why = script + " is not here (run the lab with bazel run, which puts it beside the program)";
    return;
  }
  char tmpl[] = "/tmp/ddplab_lab_XXXXXX";
  if (!mkdtemp(tmpl)) {
    *why = "no temporary directory";
    return;
  }
  run->dir = tmpl;
  // Every word is the lab's own (an interpreter path, a script beside the lab, fixed flags, mkdtemp's name).
  std::string cmd = "'" + python + "' '" + script + "'";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " --out '" + run->run_dir() + "' 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *why = "popen failed";
    return;
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) run->out.append(buf.data(), n);
  const int status = pclose(p);
  run->status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

check::CheckResult check_traced(const TracedRun& run) { return check::check_run(check::open_run(run.run_dir())); }

}  // namespace ddplab::lab
