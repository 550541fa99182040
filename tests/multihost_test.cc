// Two hosts in one machine: network namespaces joined by a veth pair, each holding one link-local address
// that only it has, so a rank can reach its peer only over that link. ddp_verify's Gloo ranks meet through
// a file store and through PyTorch's TCPStore served on host A, and a link taken down ends both ranks
// within --timeout. Needs root (ip netns); skips with the reason where namespaces cannot be made.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::CommandResult;
const std::string kVerify = "verify/ddp_verify";
const std::string kAddrA = "169.254.77.1", kAddrB = "169.254.77.2";

CommandResult ip(const std::vector<std::string>& args) {
  std::vector<std::string> cmd = {"/usr/sbin/ip"};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return testing::run_command(cmd);
}

// Hosts A and B (namespaces named after this process, so parallel runs do not meet), deleted on exit.
class TwoHosts {
 public:
  TwoHosts() : a_("ddplab" + std::to_string(getpid()) + "a"), b_("ddplab" + std::to_string(getpid()) + "b") {
    const std::vector<std::vector<std::string>> setup = {
        {"netns", "add", a_},
        {"netns", "add", b_},
        {"link", "add", "vethA", "netns", a_, "type", "veth", "peer", "name", "vethB", "netns", b_},
        {"-n", a_, "addr", "add", kAddrA + "/24", "dev", "vethA"},
        {"-n", b_, "addr", "add", kAddrB + "/24", "dev", "vethB"},
        {"-n", a_, "link", "set", "lo", "up"},
        {"-n", b_, "link", "set", "lo", "up"},
        {"-n", a_, "link", "set", "vethA", "up"},
        {"-n", b_, "link", "set", "vethB", "up"},
    };
    for (const auto& step : setup) {
      const CommandResult r = ip(step);
      if (r.status != 0) {
        why_not_ = "cannot make two network namespaces here (ip " + step[0] + " " + step[1] + " " + step[2] + ": " +
                   r.err.substr(0, r.err.find('\n')) + "); needs root and ip netns";
        return;
      }
    }
  }
  ~TwoHosts() {
    ip({"netns", "del", a_});  // deleting a namespace removes its end of the veth pair, and so both
    ip({"netns", "del", b_});
  }
  const std::string& why_not() const { return why_not_; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

  // A command run on host `ns`.
  static std::vector<std::string> on(const std::string& ns, const std::vector<std::string>& env,
                                     const std::vector<std::string>& argv) {
    std::vector<std::string> cmd = {"/usr/sbin/ip", "netns", "exec", ns, "/usr/bin/env"};
    cmd.insert(cmd.end(), env.begin(), env.end());
    cmd.insert(cmd.end(), argv.begin(), argv.end());
    return cmd;
  }

 private:
  std::string a_, b_, why_not_;
};

// Rank 0 on host A bound to its address, rank 1 on host B; `during` runs while they do.
std::pair<CommandResult, CommandResult> two_ranks(const TwoHosts& h, const std::vector<std::string>& env,
                                                  const std::vector<std::string>& args,
                                                  const std::function<void()>& during = nullptr) {
  const auto rank = [&](int r) {
    std::vector<std::string> e = env;
    e.insert(e.end(), {"RANK=" + std::to_string(r), "WORLD_SIZE=2"});
    std::vector<std::string> argv = {kVerify, "--bind", r == 0 ? kAddrA : kAddrB};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::run_command(TwoHosts::on(r == 0 ? h.a() : h.b(), e, argv));
  };
  CommandResult r1;
  std::thread t([&] { r1 = rank(1); });
  std::thread d([&] {
    if (during) during();
  });
  CommandResult r0 = rank(0);
  t.join();
  d.join();
  return {r0, r1};
}

TEST(MultiHost, GlooRanksMeetThroughAFileStore) {
  TwoHosts h;
  if (!h.why_not().empty()) GTEST_SKIP() << h.why_not();
  const std::string dir = testing::temp_dir();
  const auto [r0, r1] = two_ranks(h, {}, {"--store", "file:" + dir, "--epochs", "2", "--timeout", "20"});
  EXPECT_EQ(r0.status, 0) << r0.out << r0.err;
  EXPECT_EQ(r1.status, 0) << r1.out << r1.err;
  EXPECT_NE(r0.out.find("verified: every rank bitwise identical"), std::string::npos) << r0.out;
  EXPECT_EQ(r0.out.find("exact: False"), std::string::npos) << r0.out;
  // The addresses are the namespaces' own: the machine itself holds neither.
  const CommandResult ours = ip({"-o", "addr"});
  EXPECT_EQ(ours.out.find(kAddrA), std::string::npos) << ours.out;
  std::printf("file store across two hosts: rank 0 %d, rank 1 %d\n", r0.status, r1.status);
}

TEST(MultiHost, GlooRanksMeetThroughATcpStoreServedOnHostA) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch (its TCPStore serves here)";
  TwoHosts h;
  if (!h.why_not().empty()) GTEST_SKIP() << h.why_not();
  // torch.distributed.TCPStore on host A, alive until its stdin closes (or 120 s pass).
  int in[2], out[2];
  ASSERT_EQ(pipe(in), 0);
  ASSERT_EQ(pipe(out), 0);
  const pid_t server = fork();
  if (server == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    const std::vector<std::string> cmd =
        TwoHosts::on(h.a(), {},
                     {"/usr/bin/python3", "-c",
                      "import sys, datetime, signal, torch.distributed as dist\n"
                      "signal.alarm(120)\n"
                      "s = dist.TCPStore('" +
                          kAddrA +
                          "', 29500, 1, True, timeout=datetime.timedelta(seconds=60), wait_for_workers=False)\n"
                          "print('listening', flush=True)\n"
                          "sys.stdin.read()\n"});
    std::vector<char*> argv;
    for (const auto& s : cmd) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  std::string line;  // the ranks do not wait for a store that is not there yet
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
  close(out[0]);
  ASSERT_EQ(line, "listening") << "torch's TCPStore did not start on host A";
  const auto [r0, r1] = two_ranks(h, {"MASTER_ADDR=" + kAddrA, "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=multihost"},
                                  {"--epochs", "2", "--timeout", "20"});
  close(in[1]);
  waitpid(server, nullptr, 0);
  EXPECT_EQ(r0.status, 0) << r0.out << r0.err;
  EXPECT_EQ(r1.status, 0) << r1.out << r1.err;
  EXPECT_NE(r0.out.find("verified: every rank bitwise identical"), std::string::npos) << r0.out;
  std::printf("TCPStore on host A: rank 0 %d, rank 1 %d\n", r0.status, r1.status);
}

// Until host A has an established TCP connection from its address (Gloo's pair; a file store uses none),
// at most 60 s.
void wait_for_gloo_pair(const std::string& ns) {
  const std::string local = "014DFEA9:";  // 169.254.77.1 as /proc/net/tcp writes it (little-endian hex)
  for (int i = 0; i < 600; ++i) {
    const CommandResult r = testing::run_command(TwoHosts::on(ns, {}, {"/bin/cat", "/proc/net/tcp"}));
    size_t at = 0;
    while ((at = r.out.find(local, at)) != std::string::npos) {
      // "sl local_address rem_address st": the state follows the remote address.
      const size_t st = r.out.find(' ', r.out.find(' ', at) + 1) + 1;
      if (r.out.compare(st, 2, "01") == 0) return;
      at += local.size();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

TEST(MultiHost, ALinkTakenDownEndsBothRanksWithinTheTimeout) {
  TwoHosts h;
  if (!h.why_not().empty()) GTEST_SKIP() << h.why_not();
  const std::string dir = testing::temp_dir();
  const int timeout = 3;
  auto down_at = std::chrono::steady_clock::now();
  const auto [r0, r1] = two_ranks(
      h, {}, {"--store", "file:" + dir, "--epochs", "100000", "--timeout", std::to_string(timeout), "--quiet"}, [&] {
        wait_for_gloo_pair(h.a());
        std::this_thread::sleep_for(std::chrono::seconds(1));  // well into training
        ip({"-n", h.a(), "link", "set", "vethA", "down"});
        down_at = std::chrono::steady_clock::now();
      });
  const double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - down_at).count();
  for (const CommandResult* r : {&r0, &r1}) {
    EXPECT_NE(r->status, 0) << r->out << r->err;
    EXPECT_NE(r->err.find("failed after"), std::string::npos) << r->err;
  }
  // The timeout, the blame window and process exit; never the 100000 epochs.
  EXPECT_LT(after, timeout + 10.0);
  std::printf("link down: both ranks ended %.1f s later (--timeout %d)\nrank 0: %srank 1: %s", after, timeout,
              r0.err.c_str(), r1.err.c_str());
}

}  // namespace
}  // namespace ddplab
