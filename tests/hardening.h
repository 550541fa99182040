// What the hardening suites share (store_hardening_test, launch_hardening_test): running //verify:ddp_verify
// and the labs in the foreground or in the background, waiting with a limit, reading files.
#pragma once

#include <sys/prctl.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab::hardening {

using testing::CommandResult;
using Clock = std::chrono::steady_clock;
inline const std::string kVerify = "verify/ddp_verify";
inline const std::string kTrainer = "notebooks_ported/003_trainer/003_trainer";

// `program` with `args`, under /usr/bin/env with `env` (NAME=VALUE entries) added.
CommandResult run(const std::vector<std::string>& env, const std::string& program,
                  const std::vector<std::string>& args);

size_t lines(const std::string& s);

double seconds_since(Clock::time_point t0);

bool wait_for(double seconds, const std::function<bool()>& ready);

std::string slurp(const std::string& path);

// Writes a store value the way a rank does: all of it or nothing (temporary file, then rename).
void write_value(const std::string& path, const std::string& value);

// A program running in the background, its output in files.
struct Spawned {
  pid_t pid = -1;
  std::string out_path, err_path;
  std::string err() const { return slurp(err_path); }
};

Spawned spawn(const std::vector<std::string>& env, const std::string& program, const std::vector<std::string>& args);

// Waits up to `seconds` for the program to end (then kills it): its raw wait status, or -1.
int finish(const Spawned& s, double seconds);

class Hardening : public ::testing::Test {
 protected:
  // Orphans (a killed launcher's ranks) come to this process, so that the tests can see them end.
  static void SetUpTestSuite() { prctl(PR_SET_CHILD_SUBREAPER, 1); }
};

}  // namespace ddplab::hardening
