// ddp_verify under torchrun: the ranks meet through PyTorch's TCPStore at MASTER_ADDR:MASTER_PORT, served
// by someone else (torchrun's agent; here a TCPStore started from Debian's torch 1.13, whose own torchrun
// crashes under Python 3.11). Also: keys interchange with torch's own client, bad servers give one line,
// and the 2.x protocol (VALIDATE, PING) against a fake 2.x server (tests/fake_tcpstore.h).
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "src/store/open_store.h"
#include "src/store/store.h"
#include "src/store/tcpstore.h"
#include "tests/fake_tcpstore.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::CommandResult;
const std::string kVerify = "verify/ddp_verify";

// torch.distributed.TCPStore served by a Python process of its own: prints its port, lives until its stdin
// closes (or 300 s pass).
class PythonStore {
 public:
  PythonStore() {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      execl("/usr/bin/python3", "python3", "-c",
            "import sys, datetime, signal, torch.distributed as dist\n"
            "signal.alarm(300)\n"
            "s = dist.TCPStore('127.0.0.1', 0, 1, True, timeout=datetime.timedelta(seconds=60), "
            "wait_for_workers=False)\n"
            "print(s.port, flush=True)\n"
            "sys.stdin.read()\n",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    keep_ = in[1];
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
    close(out[0]);
    port_ = std::atoi(line.c_str());
  }
  ~PythonStore() {
    if (keep_ >= 0) close(keep_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int keep_ = -1, port_ = 0;
};

std::vector<std::string> torchrun_env(int rank, int port) {
  // What torchrun --nproc-per-node 2 sets (one node), the agent's store at MASTER_ADDR:MASTER_PORT.
  return {"RANK=" + std::to_string(rank),
          "LOCAL_RANK=" + std::to_string(rank),
          "WORLD_SIZE=2",
          "LOCAL_WORLD_SIZE=2",
          "GROUP_RANK=0",
          "MASTER_ADDR=127.0.0.1",
          "MASTER_PORT=" + std::to_string(port),
          "TORCHELASTIC_RUN_ID=torchrun-test"};
}

CommandResult rank_run(const std::vector<std::string>& env, const std::vector<std::string>& args) {
  std::vector<std::string> cmd = {"/usr/bin/env"};
  cmd.insert(cmd.end(), env.begin(), env.end());
  cmd.push_back(kVerify);
  cmd.insert(cmd.end(), args.begin(), args.end());
  return testing::run_command(cmd);
}

// Both ranks of a torchrun-style run at `port`; returns {rank 0, rank 1}.
std::pair<CommandResult, CommandResult> two_ranks(int port, const std::vector<std::string>& args) {
  CommandResult r1;
  std::thread t([&] { r1 = rank_run(torchrun_env(1, port), args); });
  CommandResult r0 = rank_run(torchrun_env(0, port), args);
  t.join();
  return {r0, r1};
}

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

TEST(Torchrun, RanksMeetThroughPytorchsTcpStore) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  PythonStore store;
  ASSERT_GT(store.port(), 0) << "torch's TCPStore did not start";
  const auto [r0, r1] = two_ranks(store.port(), {"--timeout", "20", "--epochs", "2"});
  EXPECT_EQ(r0.status, 0) << r0.err;
  EXPECT_EQ(r1.status, 0) << r1.err;
  EXPECT_NE(r0.out.find("verified: every rank bitwise identical"), std::string::npos) << r0.out << r0.err;
}

TEST(Torchrun, KeysInterchangeWithTorchsOwnClient) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  PythonStore store;
  ASSERT_GT(store.port(), 0) << "torch's TCPStore did not start";
  using namespace dist;
  EXPECT_EQ(identify_store_server("127.0.0.1", store.port(), 5000), StoreServer::tcpstore_v1);
  auto ours = TcpStoreConn::open("127.0.0.1", store.port(), StoreServer::tcpstore_v1, 5000);
  const std::string binary("a\0b\xff", 4);
  ours->set("from/ddplab", binary);
  EXPECT_FALSE(ours->get("from/torch").has_value());
  const CommandResult py = testing::run_command({"/usr/bin/python3", "-c",
                                                 "import sys, datetime, torch.distributed as dist\n"
                                                 "c = dist.TCPStore('127.0.0.1', " +
                                                     std::to_string(store.port()) +
                                                     ", 1, False, timeout=datetime.timedelta(seconds=10))\n"
                                                     "sys.stdout.write(c.get('from/ddplab').hex())\n"
                                                     "c.set('from/torch', b'hello\\x00there')\n"});
  ASSERT_EQ(py.status, 0) << py.err;
  EXPECT_EQ(py.out, "610062ff");
  EXPECT_EQ(ours->get("from/torch").value_or("<missing>"), std::string("hello\0there", 11));
  EXPECT_TRUE(ours->check("from/torch"));
}

// The agent's store is torch's; a Redis server at MASTER_ADDR:MASTER_PORT is still used (ddp_verify_test).
// Anything else: one line, exit status 2, within the timeout.
TEST(Torchrun, NoStoreOrANonTcpStoreServerGivesOneLine) {
  const int nothing = testing::free_port();
  auto [r0, r1] = two_ranks(nothing, {"--timeout", "5"});
  for (const CommandResult* r : {&r0, &r1}) {
    EXPECT_EQ(r->status, 2) << r->err;
    EXPECT_NE(r->err.find("cannot reach the store at 127.0.0.1:" + std::to_string(nothing)), std::string::npos)
        << r->err;
    EXPECT_EQ(lines(r->err), 1u) << r->err;
  }

  // A listener that accepts and says nothing.
  int port = 0;
  const int silent = testing::bind_loopback(0, &port);
  ASSERT_GE(silent, 0);
  listen(silent, 8);
  const auto t0 = std::chrono::steady_clock::now();
  std::tie(r0, r1) = two_ranks(port, {"--timeout", "2"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(silent);
  for (const CommandResult* r : {&r0, &r1}) {
    EXPECT_EQ(r->status, 2) << r->err;
    EXPECT_NE(r->err.find("it is neither PyTorch's TCPStore nor Redis (no answer within 2000 ms)"), std::string::npos)
        << r->err;
    EXPECT_EQ(lines(r->err), 1u) << r->err;
  }
  EXPECT_LT(s, 2 + 3) << "the probe waits at most --timeout";

  // --store tcp:// at a Redis server says so.
  if (access("/usr/bin/redis-server", X_OK) == 0) {
    const int rport = testing::free_port();
    const pid_t redis = fork();
    if (redis == 0) {
      execl("/usr/bin/redis-server", "redis-server", "--port", std::to_string(rport).c_str(), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", static_cast<char*>(nullptr));
      _exit(127);
    }
    EXPECT_TRUE(testing::wait_for_listener(rport, 10)) << "redis-server did not start on port " << rport;
    const std::string at = "127.0.0.1:" + std::to_string(rport);
    const CommandResult r = testing::run_command({kVerify, "--nproc", "2", "--store", "tcp://" + at});
    kill(redis, SIGTERM);
    waitpid(redis, nullptr, 0);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find(at + " is a Redis server, not PyTorch's TCPStore: give --store redis://" + at),
              std::string::npos)
        << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
  }
}

// The 2.x protocol, which no live server here speaks: a fake server written from PyTorch 2.x's source
// (not a live 2.x store) checks that VALIDATE comes first with the magic number and echoes PING.
TEST(Torchrun, Protocol2xAgainstAFakeServer) {
  for (const bool ping : {true, false}) {  // later 2.x answer PING; earlier 2.x drop a connection that sends it
    testing::FakeTcpStore2 fake(ping);
    ASSERT_GT(fake.port(), 0);
    EXPECT_EQ(dist::identify_store_server("127.0.0.1", fake.port(), 5000), dist::StoreServer::tcpstore_v2);
    auto store = dist::open_store(dist::parse_store("tcp://127.0.0.1:" + std::to_string(fake.port())), "fake");
    store->put("fake/x", "value");
    EXPECT_EQ(store->fetch("fake/x").value_or("<missing>"), "value");
    EXPECT_FALSE(store->fetch("fake/y").has_value());
    EXPECT_TRUE(store->exists("fake/x"));
    EXPECT_EQ(fake.value("/fake/x"), "value") << "keys carry torch's client prefix '/'";
    EXPECT_EQ(fake.pings() > 0, ping);
    EXPECT_EQ(fake.unvalidated(), 0) << "a store connection sent a query before VALIDATE";
  }
  // Whole runs through it (ping: a later 2.x server).
  testing::FakeTcpStore2 fake(true);
  const auto [r0, r1] = two_ranks(fake.port(), {"--timeout", "20"});
  EXPECT_EQ(r0.status, 0) << r0.err;
  EXPECT_EQ(r1.status, 0) << r1.err;
  EXPECT_NE(r0.out.find("verified: every rank bitwise identical"), std::string::npos) << r0.out << r0.err;
  EXPECT_EQ(fake.unvalidated(), 0);
}

// Liveness: a heartbeat key per rank. A beating peer is alive; once its store is gone, it is gone.
// Blame says "alive" only of peers the store saw alive; of a peer whose liveness it cannot tell (a
// TCPStore heartbeat not yet seen moving) it says so instead.
TEST(Blame, SaysAliveOnlyWhenTheStoreKnows) {
  struct Fake : dist::Store {
    std::map<std::string, std::string> kv;
    void put(const std::string& k, const std::string& v) override { kv[k] = v; }
    std::optional<std::string> fetch(const std::string& k) override {
      const auto it = kv.find(k);
      return it == kv.end() ? std::nullopt : std::optional<std::string>(it->second);
    }
    bool exists(const std::string& k) override { return kv.count(k) > 0; }
    void hold_alive(const std::string&, int) override {}
    std::vector<dist::Life> lives(const std::string&, int) override {
      return {dist::Life::alive, dist::Life::unknown, dist::Life::alive, dist::Life::gone};
    }
  } store;
  store.scope = "run";
  const std::string why = dist::name_silent_peers(store, 0, 4, "all_reduce #1", std::chrono::milliseconds(50));
  EXPECT_NE(why.find("rank 3 exited or hangs: its process is gone"), std::string::npos) << why;
  EXPECT_NE(why.find("rank 2 exited or hangs: alive, but no failure reported within 50 ms"), std::string::npos) << why;
  EXPECT_NE(why.find("rank 1 exited or hangs: no failure reported within 50 ms (the store cannot tell whether it is "
                     "alive)"),
            std::string::npos)
      << why;
}

TEST(Torchrun, HeartbeatTellsAliveFromGone) {
  testing::FakeTcpStore2 fake(true);
  const auto spec = dist::parse_store("tcp://127.0.0.1:" + std::to_string(fake.port()));
  auto watcher = dist::open_store(spec, "life");
  auto peer = dist::open_store(spec, "life");
  peer->hold_alive("life", 1);
  const auto poll_for = [&](dist::Life want) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < until) {
      if (watcher->lives("life", 2)[1] == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  EXPECT_EQ(watcher->lives("life", 2)[0], dist::Life::unknown) << "rank 0 never beat";
  EXPECT_TRUE(poll_for(dist::Life::alive));
  peer.reset();  // its process ends: the beat stops
  EXPECT_TRUE(poll_for(dist::Life::gone));
}

}  // namespace
}  // namespace ddplab
