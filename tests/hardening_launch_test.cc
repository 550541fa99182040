// //verify:ddp_verify and the labs as launchers: a killed launcher, WORLD_SIZE from the environment, fault
// flags, a rank killed by a signal, and which rank is blamed when one exits. Each test names the cause it
// guards. Only loopback addresses are used.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>

#include <gtest/gtest.h>

#include "tests/hardening.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using namespace hardening;

// /proc/<pid>/stat: the state letter and the parent (the name in parentheses may hold anything).
bool proc_stat(pid_t pid, char* state, pid_t* ppid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  int parent = 0;
  if (std::sscanf(stat.c_str() + close + 1, " %c %d", state, &parent) != 2) return false;
  *ppid = parent;
  return true;
}

// The ranks a launcher started: its children whose environment says RANK=r, by rank.
std::map<int, pid_t> ranks_of(pid_t launcher) {
  std::map<int, pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    char state = 0;
    pid_t ppid = 0;
    if (pid <= 0 || !proc_stat(pid, &state, &ppid) || ppid != launcher) continue;
    const std::string env = slurp("/proc/" + std::to_string(pid) + "/environ");
    const size_t at = env.find(std::string("\0RANK=", 6));
    if (at != std::string::npos) out[std::atoi(env.c_str() + at + 6)] = pid;
  }
  closedir(d);
  return out;
}

// Gone: no such process, or a zombie (this test is a subreaper: orphans come to it, and it reaps them).
bool gone(pid_t pid) {
  waitpid(pid, nullptr, WNOHANG);
  char state = 0;
  pid_t ppid = 0;
  return !proc_stat(pid, &state, &ppid) || state == 'Z' || state == 'X';
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
    }
    closedir(d);
  }
  return out;
}

// Cause 6: a launcher killed by SIGTERM, SIGINT or SIGKILL left its ranks running (re-parented) and its
// rendezvous directory behind.
TEST_F(Hardening, KillingTheLauncherLeavesNoRankAndNoDirectory) {
  for (const int sig : {SIGTERM, SIGINT, SIGKILL}) {
    SCOPED_TRACE(strsignal(sig));
    const std::string tmp = testing::temp_dir();
    // Rank 1 hangs at once and rank 0 waits for it (60 s): both stay alive until someone stops them.
    const Spawned launcher = spawn(
        {"TMPDIR=" + tmp}, kVerify,
        {"--nproc", "2", "--fault", "hang", "--fault-rank", "1", "--fault-at", "1", "--timeout", "60", "--quiet"});
    const bool up = wait_for(10, [&] { return launcher.err().find("injected fault: hang") != std::string::npos; });
    EXPECT_TRUE(up) << launcher.err();
    const std::map<int, pid_t> ranks = ranks_of(launcher.pid);
    EXPECT_EQ(ranks.size(), 2u);
    EXPECT_EQ(entries(tmp).size(), 1u) << "the launcher's rendezvous directory is missing";
    kill(launcher.pid, sig);
    const int status = finish(launcher, 10);
    if (sig == SIGKILL) {
      EXPECT_TRUE(WIFSIGNALED(status)) << status;
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "status " << status << "\n" << launcher.err();
      EXPECT_NE(launcher.err().find("interrupted by signal " + std::to_string(sig)), std::string::npos)
          << launcher.err();
    }
    const bool ranks_gone = wait_for(
        5, [&] { return std::all_of(ranks.begin(), ranks.end(), [](const auto& rp) { return gone(rp.second); }); });
    EXPECT_TRUE(ranks_gone) << "ranks still running after the launcher was killed";
    const bool dir_gone = wait_for(5, [&] { return entries(tmp).empty(); });
    EXPECT_TRUE(dir_gone) << "left behind in " << tmp << ": " << (entries(tmp).empty() ? "" : entries(tmp)[0]);
    for (const auto& [r, pid] : ranks) {  // whatever happened, leave nothing running
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    while (waitpid(-1, nullptr, WNOHANG) > 0) {  // orphans re-parented to this test (the watchdog)
    }
  }
}

// Cause 7: WORLD_SIZE / OMPI_COMM_WORLD_SIZE escaped the 1..64 limit of --nproc (100000 was accepted).
TEST_F(Hardening, WorldSizeFromTheEnvironmentHasTheNprocLimit) {
  const std::string dir = testing::temp_dir();
  const std::vector<std::string> args = {"--store", "file:" + dir, "--samples", "200000", "--batch-size",
                                         "1",       "--timeout",   "2",         "--quiet"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"RANK=0", "WORLD_SIZE=100000"}, "WORLD_SIZE must be in [1, 64] (got 100000)"},
      {{"RANK=0", "WORLD_SIZE=65"}, "WORLD_SIZE must be in [1, 64] (got 65)"},
      {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=100000"},
       "OMPI_COMM_WORLD_SIZE must be in [1, 64] (got 100000)"},
  };
  for (const auto& [env, expect] : cases) {
    const auto t0 = Clock::now();
    const CommandResult r = run(env, kVerify, args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_LT(seconds_since(t0), 1.5) << "refused before any rendezvous";
  }
}

// Cause 10: a fault aimed at a rank the run does not have was refused by every rank (one line each), or,
// within the 0..63 range, silently injected nothing. Now: refused once, before any rank starts.
TEST_F(Hardening, FaultFlagsAreCheckedOnceBeforeRanksStart) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"notebooks_ported/001_toy_ddp/001_toy_ddp", "--fault", "exit", "--fault-rank", "99"},
       "--fault-rank must be in [0, 1] (got 99)"},
      {{kVerify, "--fault", "exit", "--fault-rank", "5"}, "--fault-rank must be in [0, 1] (got 5)"},
      {{kVerify, "--fault-at", "3"}, "--fault-at needs --fault exit|hang"},
  };
  for (const auto& [cmd, expect] : cases) {
    std::vector<std::string> args(cmd.begin() + 1, cmd.end());
    args.insert(args.begin(), {"--backend", "gloo", "--nproc", "2"});
    const CommandResult r = run({}, cmd[0], args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err, cmd[0].substr(cmd[0].rfind('/') + 1) + ": " + expect + "\n");
  }
}

// Cause 8: a rank killed by a signal made the launcher exit 128+signal (137), outside 0/1/2/3.
TEST_F(Hardening, ARankKilledBySignalMakesTheLauncherExit1) {
  const Spawned launcher =
      spawn({}, kVerify,
            {"--nproc", "2", "--fault", "hang", "--fault-rank", "1", "--fault-at", "1", "--timeout", "30", "--quiet"});
  const bool up = wait_for(10, [&] { return launcher.err().find("injected fault: hang") != std::string::npos; });
  EXPECT_TRUE(up) << launcher.err();
  const std::map<int, pid_t> ranks = ranks_of(launcher.pid);
  ASSERT_EQ(ranks.count(1), 1u) << launcher.err();
  kill(ranks.at(1), SIGKILL);
  const int status = finish(launcher, 15);
  const std::string err = launcher.err();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "status " << status << "\n" << err;
  EXPECT_NE(err.find("rank 1 was killed by signal 9 (Killed)"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 0: all_reduce #"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 1 exited or hangs: its process is gone"), std::string::npos) << err;
}

// Cause 12: when rank 2 of 4 exits, every survivor must report, each blaming rank 2 alone. Before, a
// survivor blamed the peers that had not marked the same collective within 1 s (rank 0 failed later,
// blocked on survivors that were themselves waiting), and the launcher killed them all before any spoke.
TEST_F(Hardening, OnlyTheRankThatExitedIsBlamed) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {kTrainer, {"--backend", "gloo", "--nproc", "4", "--fault", "exit", "--fault-rank", "2", "--fault-at", "3"}},
      {kVerify,
       {"--nproc", "4", "--epochs", "2", "--fault", "exit", "--fault-rank", "2", "--fault-at", "3", "--quiet"}},
  };
  for (const auto& [program, args] : runs) {
    SCOPED_TRACE(program);
    const auto t0 = Clock::now();
    const CommandResult r = run({}, program, args);
    const double s = seconds_since(t0);
    EXPECT_EQ(r.status, 1) << r.err;
    for (int survivor : {0, 1, 3}) {
      const std::string head = "rank " + std::to_string(survivor) + ": all_reduce #";
      const size_t at = r.err.find(head);
      ASSERT_NE(at, std::string::npos) << "rank " << survivor << " did not report\n" << r.err;
      const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
      const size_t from = line.find(" ms: ") + 5, to = line.find(" (gloo: ");
      ASSERT_TRUE(from != std::string::npos + 5 && to != std::string::npos && to > from) << line;
      EXPECT_EQ(line.substr(from, to - from), "rank 2 exited or hangs: its process is gone") << line;
    }
    EXPECT_LT(s, 10.0) << "a rank that exits must not cost the 30 s timeout\n" << r.err;
  }
}

}  // namespace
}  // namespace ddplab
