// //verify:ddp_verify hardening, rendezvous and store: a --bind that does not resolve, stores that hold
// planted or stale keys, Redis passwords, run ids on file stores, peer-reported lengths (what a hostile
// peer publishes or sends over Gloo: gloo_peer_hardening_test). Each test names the cause it guards. Only loopback addresses are used; Redis tests start their own
// redis-server on a free port and skip when it is not installed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "src/comm/communicator.h"
#include "src/base/flags.h"
#include "tests/hardening.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using namespace hardening;

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
                                       "--save",       "",       "--appendonly",        "no"};
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
      {"hard/0", fake.address()},
      {"hard/1", fake.address()},
      {"hard/rank_0", "fakehost"},
      {"hard/rank_1", "fakehost"},
      {"hard/nonce", stale},
      {"hard/" + stale + "/go", std::string(64, '0')},
      {"hard/" + stale + "/0", fake.address()},
      {"hard/" + stale + "/rank_0", "fakehost"},
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

// Issue 19, cause 2: the report echoes the command line, and --store redis://:PASSWORD@... put the password
// into the page. It never reaches a page, stdout or stderr; the page shows redis://:***@.
TEST_F(Hardening, RedisPasswordsNeverReachAReportOrALine) {
  if (access("/usr/bin/redis-server", X_OK) != 0) GTEST_SKIP() << "redis-server is not installed";
  const std::string pw = "pw-never-shown";
  RedisServer redis(pw);
  ASSERT_TRUE(redis.ready()) << "redis-server did not start on port " << redis.port();
  const std::string at = "127.0.0.1:" + std::to_string(redis.port()), dir = testing::temp_dir();
  const CommandResult r = run({}, kVerify,
                              {"--nproc", "2", "--store", "redis://:" + pw + "@" + at, "--quiet", "--report",
                               dir + "/r.html", "--dump-params", dir + "/d.json"});
  EXPECT_EQ(r.status, 0) << r.err;
  const std::string page = slurp(dir + "/r.html");
  EXPECT_NE(page.find("redis://:***@" + at), std::string::npos) << "the page does not show the store";
  for (const auto& [what, text] : std::vector<std::pair<std::string, std::string>>{
           {"the page", page}, {"the dump", slurp(dir + "/d.json")}, {"stdout", r.out}, {"stderr", r.err}}) {
    EXPECT_EQ(text.find(pw), std::string::npos) << what << " holds the password";
  }
  EXPECT_EQ(hide_passwords("--store=redis://:" + pw + "@h:1"), "--store=redis://:***@h:1");
  EXPECT_EQ(hide_passwords("redis://" + pw + "@h"), "redis://***@h");
  EXPECT_EQ(hide_passwords("redis://h:6379"), "redis://h:6379");
}

// Cause 5 (file stores): --run-id namespaces a file store, so two runs can share one directory at the
// same time, and a run again with the same id ignores what the earlier one left there.
TEST_F(Hardening, FileStoreKeepsRunsApartAndIgnoresStaleOnes) {
  const std::string dir = testing::temp_dir();
  const auto args = [&](const std::string& id) {
    return std::vector<std::string>{"--nproc", "2",         "--store", "file:" + dir, "--run-id",
                                    id,        "--timeout", "10",      "--quiet"};
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
              std::string::npos)
        << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a CommError naming the rank and the limit: " << e.what();
  }
  EXPECT_EQ(c.calls, 1) << "the payloads were exchanged anyway";
}

}  // namespace
}  // namespace ddplab
