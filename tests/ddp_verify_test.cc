// //verify:ddp_verify: real Gloo processes against the simulator (exact), against torch DDP (allclose),
// rendezvous through files, Redis and mpirun, faults (a rank exits or hangs), and bad input.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::CommandResult;
using testing::json;
const std::string kVerify = "verify/ddp_verify";

CommandResult verify(std::vector<std::string> args) {
  args.insert(args.begin(), kVerify);
  return testing::run_command(args);
}

// Like verify(), with extra environment variables (torchrun / OpenMPI style ranks).
CommandResult verify_env(const std::vector<std::string>& env, std::vector<std::string> args) {
  std::vector<std::string> cmd = {"/usr/bin/env"};
  cmd.insert(cmd.end(), env.begin(), env.end());
  cmd.push_back(kVerify);
  cmd.insert(cmd.end(), args.begin(), args.end());
  return testing::run_command(cmd);
}

TEST(Verify, GlooEqualsTheSimulatorBitForBit) {
  // World sizes 2-4; a small model, and one whose 9 MiB weight makes Gloo cut its ring into 1 MiB segments.
  struct Case {
    std::vector<std::string> args;
  };
  const std::vector<Case> cases = {
      {{"--epochs", "2"}},
      {{"--layers", "8,32,16,4", "--activation", "relu", "--no-sync", "2", "--momentum", "0.9"}},
      {{"--layers", "32,1536,1536,10", "--samples", "16", "--batch-size", "2", "--lr", "0.05"}},
  };
  for (int ws : {2, 3, 4}) {
    for (const Case& c : cases) {
      auto args = c.args;
      args.insert(args.end(), {"--nproc", std::to_string(ws), "--quiet"});
      const CommandResult r = verify(args);
      std::string label = "ws=" + std::to_string(ws);
      for (const auto& a : c.args) label += " " + a;
      EXPECT_EQ(r.status, 0) << label << "\n" << r.out << r.err;
      EXPECT_EQ(r.out.find("exact: False"), std::string::npos) << label << "\n" << r.out;
      EXPECT_NE(r.out.find("verified: every rank bitwise identical"), std::string::npos) << r.out;
      std::printf("%-70s sim vs real: %s\n", label.c_str(),
                  r.out.find("exact: False") == std::string::npos ? "all exact" : "DIFFER");
    }
  }
}

// --hand-sync on real Gloo ranks: the script's own all-reduces (each layout, each hand-written arithmetic) equal the
// simulator's bit for bit at 3 ranks.
TEST(Verify, HandWrittenSyncOverGlooEqualsTheSimulator) {
  for (const std::vector<std::string>& hand :
       {std::vector<std::string>{"--hand-sync", "per-parameter", "--average", "postdivide"},
        std::vector<std::string>{"--hand-sync", "flat", "--average", "multiply"},
        std::vector<std::string>{"--hand-sync", "buckets", "--average", "divide-first", "--bucket-cap-mb", "0.0001"}}) {
    std::vector<std::string> args = hand;
    args.insert(args.end(), {"--nproc", "3", "--epochs", "2", "--quiet"});
    const CommandResult r = verify(args);
    EXPECT_EQ(r.status, 0) << hand[1] << "\n" << r.out << r.err;
    EXPECT_EQ(r.out.find("exact: False"), std::string::npos) << hand[1] << "\n" << r.out;
    EXPECT_NE(r.out.find("verified: every rank bitwise identical; the simulator agrees"), std::string::npos) << r.out;
  }
}

// Where DDP's semantics leave the ranks different (a misused no_sync, noop_hook, unbroadcast per-rank weights),
// each real Gloo rank still equals its simulated rank bit for bit, and the verdict says why the ranks differ.
TEST(Verify, RanksThatDifferByDesignEachEqualTheirSimulatedRank) {
  for (const std::vector<std::string>& c :
       {std::vector<std::string>{"--sync-on", "first", "--no-sync", "3", "--samples", "48", "--batch-size", "2"},
        std::vector<std::string>{"--sync-on", "never", "--no-sync", "2"},
        std::vector<std::string>{"--comm-hook", "noop"},
        std::vector<std::string>{"--init", "per-rank", "--broadcast", "false"}}) {
    std::vector<std::string> args = c;
    args.insert(args.end(), {"--nproc", "3"});
    const CommandResult r = verify(args);
    EXPECT_EQ(r.status, 0) << c[1] << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("verified: the ranks differ, as DDP's semantics make them (" + c[0]), std::string::npos)
        << r.out;
    // rank 0's and the last rank's sim-vs-real rows are all exact; the ranks' own comparison differs
    const size_t vs = r.out.find("# real rank 2 vs real rank 0");
    ASSERT_NE(vs, std::string::npos) << r.out;
    EXPECT_EQ(r.out.substr(0, vs).find("exact: False"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("exact: False", vs), std::string::npos) << r.out;
  }
}

// nn.SyncBatchNorm's collectives on real Gloo ranks (all_gather in the forward, all_reduce in the backward):
// every rank equals the simulator's bit for bit, and the buffers agree because every rank merged the same
// statistics (the simulator against torch: DdpSim.LiveSyncBatchNormIsTorchs).
TEST(Verify, SyncBatchNormOverGlooEqualsTheSimulator) {
  const CommandResult r = verify({"--nproc", "3", "--samples", "48", "--batch-size", "4", "--layers", "6,2",
                                  "--model", "linear(6,16),batchnorm1d(16),relu,linear(16,2)", "--sync-batchnorm",
                                  "true", "--quiet"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("exact: False"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("SyncBatchNorm updates every rank's running statistics"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verified: every rank bitwise identical"), std::string::npos) << r.out;
}

TEST(Verify, AgainstTorchDdpOnGloo) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: live DDP check skipped";
  const std::vector<std::string> args = {"--samples",    "30",   "--batch-size", "3",  "--layers", "5,9,3",
                                         "--activation", "relu", "--loss",       "ce", "--epochs", "2",
                                         "--lr",         "0.2"};
  const std::string dir = testing::temp_dir();
  auto v = args;
  v.insert(v.end(), {"--nproc", "3", "--quiet", "--dump-params", dir + "/real.json"});
  ASSERT_EQ(verify(v).status, 0);
  std::vector<std::string> py = {"/usr/bin/python3", "sim/ddp_reference.py", "--world-size", "3"};
  py.insert(py.end(), args.begin(), args.end());
  py.insert(py.end(), {"--dump-params", dir + "/torch.json"});
  const CommandResult t = testing::run_command(py);
  ASSERT_EQ(t.status, 0) << t.err;
  const json real = testing::load_json(dir + "/real.json"), torch = testing::load_json(dir + "/torch.json");
  for (size_t r = 0; r < 3; ++r) {
    for (size_t e = 0; e < 2; ++e) {
      EXPECT_EQ(real["sampler_indices"][e][r], torch["sampler_indices"][e][r]) << "rank " << r << " epoch " << e;
    }
    for (const auto& [name, want] : torch["replicas"][r].items()) {
      const auto m = testing::match("real gloo vs torch DDP rank" + std::to_string(r) + " " + name,
                                    testing::floats(real["replicas"][r][name]), testing::floats(want), 1.3e-6, 1e-5);
      EXPECT_TRUE(m.allclose);
    }
  }
}

TEST(Verify, DumpIsDdpSimsDumpForTheSameRun) {
  const std::string dir = testing::temp_dir();
  const std::vector<std::string> args = {"--world-size", "3",     "--epochs",     "2",
                                         "--layers",     "6,8,2", "--activation", "relu"};
  auto v = args;
  v.insert(v.end(), {"--nproc", "3", "--quiet", "--dump-params", dir + "/real.json"});
  ASSERT_EQ(verify(v).status, 0);
  auto s = args;
  s.insert(s.begin(), "sim/ddp_sim");
  s.insert(s.end(), {"--quiet", "--dump-params", dir + "/sim.json"});
  ASSERT_EQ(testing::run_command(s).status, 0);
  const json real = testing::load_json(dir + "/real.json"), sim = testing::load_json(dir + "/sim.json");
  for (const char* key : {"replicas", "sampler_indices", "losses", "args"}) EXPECT_EQ(real[key], sim[key]) << key;
}

TEST(Verify, RanksMeetThroughRedisTorchrunStyle) {
  if (access("/usr/bin/redis-server", X_OK) != 0) GTEST_SKIP() << "redis-server is not installed";
  const int port = testing::free_port();
  const pid_t redis = fork();
  if (redis == 0) {
    execl("/usr/bin/redis-server", "redis-server", "--port", std::to_string(port).c_str(), "--bind", "127.0.0.1",
          "--save", "", "--appendonly", "no", static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_TRUE(testing::wait_for_listener(port, 10)) << "redis-server did not start on port " << port;
  // Two ranks started separately, as two hosts would start them; they meet at MASTER_ADDR:MASTER_PORT.
  const std::vector<std::string> env1 = {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                                         "MASTER_PORT=" + std::to_string(port)};
  CommandResult r1;
  std::thread t([&] { r1 = verify_env(env1, {"--run-id", "redis-test", "--quiet"}); });
  const CommandResult r0 =
      verify_env({"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)},
                 {"--run-id", "redis-test", "--quiet"});
  t.join();
  kill(redis, SIGTERM);
  waitpid(redis, nullptr, 0);
  EXPECT_EQ(r0.status, 0) << r0.err;
  EXPECT_EQ(r1.status, 0) << r1.err;
  EXPECT_NE(r0.out.find("verified"), std::string::npos) << r0.out;
}

TEST(Verify, RunsUnderMpirun) {
  if (access("/usr/bin/mpirun", X_OK) != 0) GTEST_SKIP() << "mpirun (openmpi-bin) is not installed";
  const std::string dir = testing::temp_dir();
  const CommandResult r = testing::run_command({"/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                                                kVerify, "--store", "file:" + dir, "--quiet"});
  if (r.status != 0 && r.err.find("verified") == std::string::npos && r.out.find("ddp_verify") == std::string::npos) {
    GTEST_SKIP() << "mpirun could not start processes here: " << r.err.substr(0, 300);
  }
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("verified"), std::string::npos) << r.out;
}

TEST(Verify, ARankThatExitsStopsTheOthersAndNamesIt) {
  const auto t0 = std::chrono::steady_clock::now();
  const CommandResult r =
      verify({"--nproc", "3", "--fault", "exit", "--fault-rank", "1", "--fault-at", "2", "--quiet"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("rank 1 exited with status 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("all_reduce #"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1 exited or hangs"), std::string::npos) << r.err;
  // One numbering: the injected fault and every survivor name the same collective in the learner's terms.
  const std::string fault = "rank 1: injected fault: exit at step 1: bucket 0's all-reduce (--fault-at 2";
  EXPECT_NE(r.err.find(fault), std::string::npos) << r.err;
  for (const char* survivor : {"rank 0: step 1: bucket 0's all-reduce (all_reduce #", "rank 2: step 1: bucket 0's "}) {
    EXPECT_NE(r.err.find(survivor), std::string::npos) << survivor << "\n" << r.err;
  }
  // The timeout is 30 s: 20 s leaves a loaded machine room and still tells the two apart.
  EXPECT_LT(s, 20.0) << "a crashed peer must not cost the whole timeout";
}

TEST(Verify, ARankThatHangsIsNamedWithinTheTimeout) {
  const auto t0 = std::chrono::steady_clock::now();
  const CommandResult r =
      verify({"--nproc", "3", "--fault", "hang", "--fault-rank", "2", "--fault-at", "3", "--timeout", "2", "--quiet"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("rank 2 exited or hangs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("failed after at most 2000 ms"), std::string::npos) << r.err;
  EXPECT_LT(s, 2 + 2 + 5 + 3) << "timeout + the launcher's grace + SIGKILL delay, with slack";
}

TEST(Verify, APortInUseBySomethingElseIsNotWaitedOn) {
  // A listener that accepts and never answers: Redis' client would block forever on it.
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  listen(s, 4);
  const CommandResult r = verify({"--nproc", "2", "--store", "redis://127.0.0.1:" + std::to_string(ntohs(a.sin_port))});
  close(s);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("the port is in use by something that is not Redis"), std::string::npos) << r.err;
}

TEST(Verify, RanksWithDifferentConfigurationsAreRefused) {
  const std::string dir = testing::temp_dir();
  CommandResult r1;
  std::thread t([&] { r1 = verify_env({"RANK=1", "WORLD_SIZE=2"}, {"--store", "file:" + dir, "--lr", "0.1"}); });
  const CommandResult r0 = verify_env({"RANK=0", "WORLD_SIZE=2"}, {"--store", "file:" + dir});
  t.join();
  for (const CommandResult* r : std::vector<const CommandResult*>{&r0, &r1}) {
    EXPECT_EQ(r->status, 2);
    EXPECT_NE(r->err.find("rank 1 was started with --lr 0.1, rank 0 with --lr 0.01"), std::string::npos) << r->err;
  }
}

struct BadInput {
  std::vector<std::string> env, args;
  int status;
  std::string expect;
};

TEST(Verify, BadInputAndUnavailableBackends) {
  const std::vector<BadInput> cases = {
      {{}, {}, 2, "no ranks: give --nproc N"},
      {{}, {"--nproc", "3", "--world-size", "2"}, 2, "--world-size 2 disagrees with --nproc 3"},
      {{},
       {"--nproc", "2", "--store", "file:/nonexistent-dir"},
       2,
       "store directory '/nonexistent-dir' does not exist"},
      {{}, {"--nproc", "2", "--store", "redis://127.0.0.1:1"}, 2, "cannot reach the Redis store at 127.0.0.1:1"},
      {{}, {"--nproc", "2", "--store", "tcp://x"}, 2, "--store must be tcp://HOST:PORT with a port in [1, 65535]"},
      {{}, {"--nproc", "2", "--store", "ftp://x"}, 2, "--store must be file:DIR, redis://HOST:PORT or tcp://HOST:PORT"},
      {{"RANK=0"}, {"--store", "file:/tmp"}, 2, "RANK is set but WORLD_SIZE is not"},
      {{"WORLD_SIZE=2"}, {"--store", "file:/tmp"}, 2, "WORLD_SIZE is set but RANK is not"},
      {{"RANK=2", "WORLD_SIZE=2"}, {"--store", "file:/tmp"}, 2, "RANK=2 is not below WORLD_SIZE=2"},
      {{"RANK=0", "WORLD_SIZE=2"}, {"--world-size", "3", "--store", "file:/tmp"}, 2, "torchrun says WORLD_SIZE=2"},
      {{"OMPI_COMM_WORLD_RANK=0"}, {}, 2, "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not"},
      {{}, {"--nproc", "0"}, 2, "--nproc must be in [1, 64]"},
      {{}, {"--nproc", "2", "--backend", "mpi"}, 2, "--backend must be one of gloo|nccl"},
      {{}, {"--nproc", "2", "--timeout", "0"}, 2, "--timeout must be in"},
      {{}, {"--nproc", "2", "--backend", "nccl"}, 3, "NCCL backend needs 2 CUDA devices"},
      {{}, {"--nproc", "2", "--share-gpus"}, 2, "--share-gpus needs --backend nccl"},
      {{}, {"--nproc", "2", "--nccl-exact"}, 2, "--nccl-exact needs --backend nccl"},
      {{},
       {"--nproc", "2", "--backend", "nccl", "--nccl-exact", "--allreduce", "ring"},
       2,
       "--nccl-exact compares with the simulator's --allreduce nccl-ring (got ring)"},
  };
  for (const BadInput& c : cases) {
    const CommandResult r = c.env.empty() ? verify(c.args) : verify_env(c.env, c.args);
    EXPECT_EQ(r.status, c.status) << c.expect << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << "stderr: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace ddplab
