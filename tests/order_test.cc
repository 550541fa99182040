// Issue 41: ddp_check learns the all-reduce's addition order from the run itself. The recorder's probes
// (DDPTrace(measure_order=...), verify/ddplab_trace) on in-process communicators whose order the test hides
// (tests/ddp_check/order_probe.py: rings of one or several channels and any chunking recovered; a tree and
// pairs of pairs said to be no chain; a rank whose decoding fails still takes part in every all-reduce, so none
// hangs), and on real torch DDP runs over Gloo at 3, 5 and 8 ranks: the measured
// order is Gloo's ring, chunk for chunk, and ddp_check, replaying it, predicts every gradient bit for bit.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "src/collective/measured.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::json;

std::string tail(const std::string& s) { return s.size() > 3000 ? s.substr(s.size() - 3000) : s; }

TEST(OrderProbe, HiddenOrdersRecoveredOrSaidSo) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: the probes not run";
  const auto r = testing::run_command({"/usr/bin/timeout", "300", "/usr/bin/python3", "tests/ddp_check/order_probe.py"});
  std::printf("%s", r.out.c_str());
  ASSERT_EQ(r.status, 0) << tail(r.out + r.err);
  EXPECT_NE(r.out.find("all cases hold"), std::string::npos);
  EXPECT_NE(r.out.find("ok   eight ranks, four channels"), std::string::npos);
  EXPECT_NE(r.out.find("ok   tree at 8 ranks"), std::string::npos);
  EXPECT_NE(r.out.find("ok   a rank whose decoding fails takes part in every all-reduce"), std::string::npos);
}

// The measured_order script traced at `ws` ranks over Gloo by `python`; its run directory.
std::string traced_run(int ws, const std::string& python = "/usr/bin/python3") {
  const std::string dir = testing::temp_dir() + "/order_ws" + std::to_string(ws) + (python == "/usr/bin/python3" ? "" : "_t2");
  const auto r = testing::run_command({"/usr/bin/timeout", "600", python,
                                       "tests/ddp_check/scripts/measured_order.py", "--out", dir, "--world-size",
                                       std::to_string(ws)});
  EXPECT_EQ(r.status, 0) << tail(r.err);
  return dir;
}

TEST(OrderProbe, GlooRunsCheckExactWithTheOrderMeasured) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: no real run";
  for (int ws : {3, 5, 8}) {
    const std::string dir = traced_run(ws), out = dir + "/check.json";
    const auto check = testing::run_command({"verify/ddp_check", dir, "--json", out, "--quiet"});
    ASSERT_EQ(check.status, 0) << tail(check.out + check.err);
    const json j = testing::load_json(out);
    const std::string order = j["order"];
    EXPECT_EQ(order.rfind("measured on the run's own communicator", 0), 0u) << order;
    EXPECT_EQ(j["grads"]["exact"], j["grads"]["checked"]) << "ws " << ws;
    EXPECT_GT(j["grads"]["checked"].get<int>(), 0);
    EXPECT_EQ(j["params"]["exact"], j["params"]["checked"]) << "ws " << ws;
    // What the probes found is Gloo's ring, chunk for chunk (read off ddplab's own ring.cc).
    const json m = testing::load_json(dir + "/rank0/manifest.json");
    const json& sizes = m["allreduce_order"]["sizes"];
    EXPECT_GE(sizes.size(), 2u) << "the script's buckets are of several sizes";
    for (const json& s : sizes) {
      const size_t n = s["n"];
      const collective::MeasuredOrder ring = collective::chain_order_of(collective::Algorithm::ring, ws, n);
      ASSERT_EQ(s["runs"].size(), ring.runs.size()) << "ws " << ws << " n " << n;
      for (size_t k = 0; k < ring.runs.size(); ++k) {
        EXPECT_EQ(s["runs"][k][0].get<size_t>(), ring.runs[k].begin);
        EXPECT_EQ(s["runs"][k][1].get<size_t>(), ring.runs[k].end);
        // The first two ranks commute (a + b = b + a): compare the rest, and the first two as a set.
        std::vector<int> got = s["runs"][k][2], want = ring.runs[k].order;
        std::sort(got.begin(), got.begin() + 2);
        std::sort(want.begin(), want.begin() + 2);
        EXPECT_EQ(got, want) << "ws " << ws << " n " << n << " run " << k;
      }
    }
    std::printf("world size %d: %s; grads %d/%d exact\n", ws, order.c_str(), j["grads"]["exact"].get<int>(),
                j["grads"]["checked"].get<int>());
  }
}

// The same on torch 2.x (tools/install_deps.sh --with-torch2's venv; CI has it), at 4 ranks.
TEST(OrderProbe, Torch2GlooRunChecksExactWithTheOrderMeasured) {
  const char* venv = std::getenv("DDPLAB_TORCH2_VENV");
  const std::string py = std::string(venv && *venv ? venv : "/opt/ddplab-torch2") + "/bin/python";
  if (testing::run_command({py, "-c", "import torch"}).status != 0) GTEST_SKIP() << py << " cannot import torch";
  const std::string dir = traced_run(4, py), out = dir + "/check.json";
  const auto check = testing::run_command({"verify/ddp_check", dir, "--json", out, "--quiet"});
  ASSERT_EQ(check.status, 0) << tail(check.out + check.err);
  const json j = testing::load_json(out);
  EXPECT_EQ(j["order"].get<std::string>().rfind("measured on the run's own communicator", 0), 0u) << j["order"];
  EXPECT_EQ(j["grads"]["exact"], j["grads"]["checked"]);
  EXPECT_EQ(j["params"]["exact"], j["params"]["checked"]);
}

// Measuring the order at close() changes nothing of the run: traced with the probes and untraced, every rank's
// final parameters are bitwise equal.
TEST(OrderProbe, TracedWithTheProbesEqualsUntraced) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: no real run";
  const auto r = testing::run_command({"/usr/bin/timeout", "600", "/usr/bin/python3",
                                       "tests/ddp_check/traced_equals_untraced.py", "measured_order"});
  std::printf("%s", r.out.c_str());
  EXPECT_EQ(r.status, 0) << tail(r.err);
  EXPECT_NE(r.out.find("ok   measured_order"), std::string::npos);
}

// A fault inside the probes on one rank (tests/ddp_check/order_faults.py: its decoding fails, or it cannot tell its
// bucket sizes) leaves the training bit for bit as untraced, says so in one stderr line, hangs no rank, and
// raises no false alarm: ddp_check still finds the run as predicted.
TEST(OrderProbe, AFaultInTheProbesLeavesTheRunAndTheCheck) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: no real run";
  for (const std::string fault : {"decode", "sizes"}) {
    const std::string dir = testing::temp_dir() + "/fault_" + fault, traced = dir + ".traced.json",
                      untraced = dir + ".untraced.json";
    const auto t = testing::run_command({"/usr/bin/timeout", "300", "/usr/bin/python3", "tests/ddp_check/order_faults.py",
                                         "--fault", fault, "--out", dir, "--final", traced});
    ASSERT_EQ(t.status, 0) << fault << ": " << tail(t.err);
    const auto u = testing::run_command({"/usr/bin/timeout", "300", "/usr/bin/python3", "tests/ddp_check/order_faults.py",
                                         "--fault", fault, "--no-trace", "--final", untraced});
    ASSERT_EQ(u.status, 0) << fault << ": " << tail(u.err);
    EXPECT_EQ(testing::load_json(traced), testing::load_json(untraced)) << fault << ": the training changed";
    size_t lines = 0;
    for (size_t at = t.err.find("ddplab_trace:"); at != std::string::npos; at = t.err.find("ddplab_trace:", at + 1)) ++lines;
    EXPECT_EQ(lines, 1u) << fault << ":\n" << t.err;
    EXPECT_NE(t.err.find("MemoryError: injected"), std::string::npos) << fault;
    const std::string out = dir + "/check.json";
    const auto check = testing::run_command({"verify/ddp_check", dir, "--json", out, "--quiet"});
    EXPECT_EQ(check.status, 0) << fault << ": " << tail(check.out + check.err);
    const json j = testing::load_json(out);
    EXPECT_EQ(j["grads"]["exact"], j["grads"]["checked"]) << fault;
    EXPECT_EQ(j["verdict"], "as-predicted") << fault;
    if (fault == "sizes") {
      EXPECT_NE(j["order"].get<std::string>().find("not measured"), std::string::npos) << j["order"];
    }
  }
}

// A measured order whose seeded all-reduce does not come out as recorded is not used, and the output says so.
TEST(OrderProbe, AnOrderThatDoesNotReproduceIsSaidSo) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: no real run";
  const std::string dir = traced_run(3);
  json m = testing::load_json(dir + "/rank0/manifest.json");
  m["allreduce_order"]["sizes"][0]["digest"] = m["allreduce_order"]["sizes"][0]["digest"].get<int64_t>() ^ 1;
  std::ofstream(dir + "/rank0/manifest.json") << m.dump();
  const auto check = testing::run_command({"verify/ddp_check", dir});
  std::printf("%s", check.out.substr(0, 600).c_str());
  EXPECT_EQ(check.status, 0) << "Gloo's order is known: the run still checks exact";
  EXPECT_NE(check.out.find("Gloo's ring"), std::string::npos);
  EXPECT_NE(check.out.find("does not reproduce the seeded all-reduce"), std::string::npos);
}

}  // namespace
}  // namespace ddplab
