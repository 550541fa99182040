// //verify:ddp_verify hardening: a --bind that does not resolve, stores that hold planted, stale or malformed
// keys, Redis passwords, run ids on file stores, peer-reported lengths, a killed launcher, WORLD_SIZE from
// the environment, a rank killed by a signal, and which rank is blamed when one exits. Each test names the
// cause it guards. Only loopback addresses are used; Redis tests start their own redis-server on a free
// port and skip when it is not installed.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "src/comm/communicator.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::CommandResult;
using Clock = std::chrono::steady_clock;
const std::string kVerify = "verify/ddp_verify";
const std::string kTrainer = "notebooks_ported/003_trainer/003_trainer";

CommandResult run(const std::vector<std::string>& env, const std::string& program, const std::vector<std::string>& args) {
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

// A program running in the background, its output in files.
struct Spawned {
  pid_t pid = -1;
  std::string out_path, err_path;
  std::string err() const { return slurp(err_path); }
};

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

// One Redis command (RESP), the first line of the reply ("+OK", "-NOAUTH ...", ...), "" on failure.
std::string redis_command(int port, const std::vector<std::string>& args) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string msg = "*" + std::to_string(args.size()) + "\r\n";
    for (const std::string& x : args) msg += "$" + std::to_string(x.size()) + "\r\n" + x + "\r\n";
    if (send(fd, msg.data(), msg.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(msg.size())) {
      char c;
      while (recv(fd, &c, 1, 0) == 1 && c != '\n') reply += c;
      if (!reply.empty() && reply.back() == '\r') reply.pop_back();
    }
  }
  close(fd);
  return reply;
}

// A redis-server of this test's own on a free loopback port, optionally with a password.
class RedisServer {
 public:
  explicit RedisServer(const std::string& password = "") : port_(testing::free_port()) {
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<std::string> args = {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                       "--save", "", "--appendonly", "no"};
      if (!password.empty()) args.insert(args.end(), {"--requirepass", password});
      std::vector<char*> a;
      for (const std::string& x : args) a.push_back(const_cast<char*>(x.c_str()));
      a.push_back(nullptr);
      if (!freopen("/dev/null", "w", stdout)) _exit(127);
      execv("/usr/bin/redis-server", a.data());
      _exit(127);
    }
    ready_ = wait_for(5, [&] {
      const std::string r = redis_command(port_, {"PING"});
      return r == "+PONG" || r.rfind("-NOAUTH", 0) == 0;
    });
  }
  ~RedisServer() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  int port() const { return port_; }
  bool ready() const { return ready_; }

 private:
  int port_;
  pid_t pid_ = -1;
  bool ready_ = false;
};

// A loopback listener that no rank should ever connect to, and a Gloo address (sockaddr_storage, then a
// sequence number: 136 bytes) pointing at it.
struct FakePeer {
  int fd = -1, port = 0;
  FakePeer() {
    fd = testing::bind_loopback(SOCK_NONBLOCK, &port);
    listen(fd, 16);
  }
  ~FakePeer() { close(fd); }
  std::string address() const {
    std::string bytes(sizeof(sockaddr_storage) + sizeof(ssize_t), '\0');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::memcpy(bytes.data(), &a, sizeof a);
    const ssize_t seq = 0;
    std::memcpy(bytes.data() + sizeof(sockaddr_storage), &seq, sizeof seq);
    return bytes;
  }
  bool contacted() const {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
  }
};

class Hardening : public ::testing::Test {
 protected:
  // Orphans (a killed launcher's ranks) come to this process, so that the tests can see them end.
  static void SetUpTestSuite() { prctl(PR_SET_CHILD_SUBREAPER, 1); }
};

// Cause 1: `--bind <name that does not resolve>` crashed inside Gloo (getaddrinfo's error went unchecked).
TEST_F(Hardening, BindThatDoesNotResolveIsOneLineAndStatus2) {
  // A 64-character label cannot be resolved, and the resolver refuses it without asking any server.
  const std::string name = std::string(64, 'a') + ".invalid";
  const std::string dir = testing::temp_dir();
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{}, {"--nproc", "2", "--bind", name, "--quiet"}},
      {{"RANK=0", "WORLD_SIZE=1"}, {"--store", "file:" + dir, "--bind", name, "--quiet"}},
  };
  for (const auto& [env, args] : cases) {
    const CommandResult r = run(env, kVerify, args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find("--bind '" + name + "' does not resolve"), std::string::npos) << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
  }
}

// Cause 5 (Redis): keys planted under the run's id, in Gloo's layout and as a stale earlier run of the same
// id, are never used: the run succeeds and nobody connects to the planted address.
TEST_F(Hardening, RedisStoreNeverUsesPlantedOrStaleKeys) {
  if (access("/usr/bin/redis-server", X_OK) != 0) GTEST_SKIP() << "redis-server is not installed";
  RedisServer redis;
  ASSERT_TRUE(redis.ready()) << "redis-server did not start on port " << redis.port();
  const FakePeer fake;
  const std::string stale = "0123456789abcdef0123456789abcdef";
  const std::vector<std::pair<std::string, std::string>> planted = {
      {"hard/0", fake.address()},          {"hard/1", fake.address()},
      {"hard/rank_0", "fakehost"},         {"hard/rank_1", "fakehost"},
      {"hard/nonce", stale},               {"hard/" + stale + "/go", std::string(64, '0')},
      {"hard/" + stale + "/0", fake.address()}, {"hard/" + stale + "/rank_0", "fakehost"},
  };
  for (const auto& [k, v] : planted) ASSERT_EQ(redis_command(redis.port(), {"SET", k, v}), "+OK") << k;
  const auto env = [&](int r) {
    return std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                                    "MASTER_PORT=" + std::to_string(redis.port())};
  };
  const std::vector<std::string> args = {"--run-id", "hard", "--timeout", "10", "--quiet"};
  CommandResult r1;
  std::thread t([&] { r1 = run(env(1), kVerify, args); });  // rank 1 first: it sees the stale nonce
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const CommandResult r0 = run(env(0), kVerify, args);
  t.join();
  EXPECT_EQ(r0.status, 0) << r0.err;
  EXPECT_EQ(r1.status, 0) << r1.err;
  EXPECT_NE(r0.out.find("verified: every rank bitwise identical"), std::string::npos) << r0.out;
  EXPECT_FALSE(fake.contacted()) << "a rank connected to the address planted in the store";
}

// Cause 5 (Redis AUTH): a password-protected server is reported as such, a wrong password as refused (and
// not echoed), and the right one works from the URL and from DDPLAB_REDIS_PASSWORD.
TEST_F(Hardening, RedisPasswordsAreSentAndReported) {
  if (access("/usr/bin/redis-server", X_OK) != 0) GTEST_SKIP() << "redis-server is not installed";
  RedisServer redis("pw-for-the-test");
  ASSERT_TRUE(redis.ready()) << "redis-server did not start on port " << redis.port();
  const std::string at = "127.0.0.1:" + std::to_string(redis.port());

  CommandResult r = run({}, kVerify, {"--nproc", "2", "--store", "redis://" + at});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("the Redis store at " + at + " needs a password"), std::string::npos) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;

  r = run({}, kVerify, {"--nproc", "2", "--store", "redis://:not-the-password@" + at});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("the Redis store at " + at + " refused the password"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("not-the-password"), std::string::npos) << "the password was printed: " << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;

  r = run({}, kVerify, {"--nproc", "2", "--store", "redis://:pw-for-the-test@" + at, "--quiet"});
  EXPECT_EQ(r.status, 0) << r.err;
  r = run({"DDPLAB_REDIS_PASSWORD=pw-for-the-test"}, kVerify, {"--nproc", "2", "--store", "redis://" + at, "--quiet"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("verified: every rank bitwise identical"), std::string::npos) << r.out;
}

// Cause 5 (file stores): --run-id namespaces a file store, so two runs can share one directory at the
// same time, and a run again with the same id ignores what the earlier one left there.
TEST_F(Hardening, FileStoreKeepsRunsApartAndIgnoresStaleOnes) {
  const std::string dir = testing::temp_dir();
  const auto args = [&](const std::string& id) {
    return std::vector<std::string>{"--nproc", "2", "--store", "file:" + dir, "--run-id", id, "--timeout", "10", "--quiet"};
  };
  CommandResult a;
  std::thread t([&] { a = run({}, kVerify, args("run-a")); });
  const CommandResult b = run({}, kVerify, args("run-b"));
  t.join();
  EXPECT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(b.status, 0) << b.err;
  const CommandResult again = run({}, kVerify, args("run-a"));  // the store now holds run-a's keys
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(again.err.find("already exists"), std::string::npos) << again.err;
  struct stat st {};
  EXPECT_EQ(stat((dir + "/run-a").c_str(), &st), 0) << "no directory per run id";
}

// Cause 5 (values): this test plays rank 1 in a file store and publishes a 7-byte "address": rank 0
// refuses it in one line instead of handing it to Gloo.
TEST_F(Hardening, StoreValuesAreCheckedBeforeUse) {
  const std::string dir = testing::temp_dir();
  const Spawned rank0 = spawn({"RANK=0", "WORLD_SIZE=2"}, kVerify,
                              {"--store", "file:" + dir, "--run-id", "v", "--timeout", "5", "--quiet"});
  std::string nonce;
  EXPECT_TRUE(wait_for(5, [&] { return (nonce = slurp(dir + "/v/nonce")).size() == 32; })) << "no nonce from rank 0";
  const std::string scope = dir + "/v/" + nonce, token = "00112233445566778899aabbccddeeff";
  if (nonce.size() == 32) {
    write_value(scope + "/join_1", token);
    std::string go;
    EXPECT_TRUE(wait_for(5, [&] { return (go = slurp(scope + "/go")).size() == 64; })) << "rank 0 never answered";
    EXPECT_EQ(go.substr(32), token);
    write_value(scope + "/rank_1", "localhost");
    write_value(scope + "/1", "garbage");
  }
  const int status = finish(rank0, 15);
  const std::string err = rank0.err();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status << "\n" << err;
  EXPECT_NE(err.find("rank 0: rank 1's address in the store is not a Gloo address (7 bytes, expected 136"),
            std::string::npos) << err;
  EXPECT_EQ(lines(err), 1u) << err;
}

// Cause 5 (lengths): all_gather_strings sized its buffer by whatever length a peer reported.
class LyingPeer : public comm::Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::string backend() const override { return "test"; }
  void all_reduce(float*, size_t, comm::ReduceOp) override {}
  void broadcast(float*, size_t, int) override {}
  void barrier() override {}
  void all_gather(const void* in, size_t bytes, void* out) override {
    ++calls;
    std::memcpy(out, in, bytes);
    const uint64_t huge = uint64_t{1} << 62;  // rank 1 "has" a 4 EiB string
    if (bytes == sizeof huge) std::memcpy(static_cast<char*>(out) + bytes, &huge, sizeof huge);
  }
  int calls = 0;
};

TEST_F(Hardening, GatheredStringLengthsAreCheckedBeforeUse) {
  LyingPeer c;
  try {
    comm::all_gather_strings(c, "mine");
    ADD_FAILURE() << "a 4 EiB length was accepted";
  } catch (const comm::CommError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 reported a string of 4611686018427387904 bytes; the limit is"),
              std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a CommError naming the rank and the limit: " << e.what();
  }
  EXPECT_EQ(c.calls, 1) << "the payloads were exchanged anyway";
}

// Cause 6: a launcher killed by SIGTERM, SIGINT or SIGKILL left its ranks running (re-parented) and its
// rendezvous directory behind.
TEST_F(Hardening, KillingTheLauncherLeavesNoRankAndNoDirectory) {
  for (const int sig : {SIGTERM, SIGINT, SIGKILL}) {
    SCOPED_TRACE(strsignal(sig));
    const std::string tmp = testing::temp_dir();
    // Rank 1 hangs at once and rank 0 waits for it (60 s): both stay alive until someone stops them.
    const Spawned launcher = spawn({"TMPDIR=" + tmp}, kVerify,
                                   {"--nproc", "2", "--fault", "hang", "--fault-rank", "1", "--fault-at", "1",
                                    "--timeout", "60", "--quiet"});
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
      EXPECT_NE(launcher.err().find("interrupted by signal " + std::to_string(sig)), std::string::npos) << launcher.err();
    }
    const bool ranks_gone = wait_for(5, [&] {
      return std::all_of(ranks.begin(), ranks.end(), [](const auto& rp) { return gone(rp.second); });
    });
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
  const std::vector<std::string> args = {"--store", "file:" + dir, "--samples", "200000", "--batch-size", "1",
                                         "--timeout", "2", "--quiet"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"RANK=0", "WORLD_SIZE=100000"}, "WORLD_SIZE must be in [1, 64] (got 100000)"},
      {{"RANK=0", "WORLD_SIZE=65"}, "WORLD_SIZE must be in [1, 64] (got 65)"},
      {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=100000"}, "OMPI_COMM_WORLD_SIZE must be in [1, 64] (got 100000)"},
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
      {{"notebooks_ported/001_toy_ddp/001_toy_ddp", "--fault", "exit", "--fault-rank", "99"}, "--fault-rank must be in [0, 1] (got 99)"},
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
  const Spawned launcher = spawn({}, kVerify, {"--nproc", "2", "--fault", "hang", "--fault-rank", "1", "--fault-at",
                                               "1", "--timeout", "30", "--quiet"});
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
      {kVerify, {"--nproc", "4", "--epochs", "2", "--fault", "exit", "--fault-rank", "2", "--fault-at", "3", "--quiet"}},
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
