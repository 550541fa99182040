// The recorder (verify/ddplab_trace) never breaks a training run, under Debian's torch 1.13 and the torch 2.x
// of tools/install_deps.sh --with-torch2, on 2 Gloo ranks:
//  - tests/ddp_check/recorder_faults.py injects a fault at each of its hook points (parameter hook, forward pre-hook,
//    engine callbacks, optimizer.step wrapper and closure, manifest and step writers, close(), every spy, an
//    unknown tensor kind, a full disk, an unwritable run directory): one stderr line, "stopped" in the manifest,
//    the training bitwise as untraced; and each comm hook torch ships recorded with its kind;
//  - models the trace format cannot hold whole (a sparse embedding, a float64 model) train bitwise as untraced,
//    and the manifest lists those parameters in "unchecked_params" and records the rest;
//  - LightningCallback under every Lightning DDP strategy that runs on CPU (torch 2.x only: Lightning is installed
//    there) leaves a complete manifest on every rank.
// Where torch 2.x is absent its cases skip with that reason, except in CI (CI=true), where they fail.
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::json;

// tools/install_deps.sh --with-torch2's virtual environment.
std::string torch2_python() {
  const char* env = std::getenv("DDPLAB_TORCH2_VENV");
  return std::string(env && *env ? env : "/opt/ddplab-torch2") + "/bin/python";
}

// "" when the torch can run the scripts, else why not.
std::string unavailable(const std::string& torch) {
  if (torch == "torch1.13") return testing::torch_available() ? "" : "/usr/bin/python3 cannot import torch";
  const std::string py = torch2_python();
  if (access(py.c_str(), X_OK) != 0) return py + " is absent: run tools/install_deps.sh --with-torch2";
  static const int status = testing::run_command({py, "-c", "import torch, lightning"}).status;
  return status == 0 ? "" : py + " cannot import torch and lightning";
}

// The torch 2.x cases skip with the reason where the venv is absent, and fail in CI (CI=true).
#define SKIP_UNLESS_AVAILABLE(torch)                                                             \
  if (const std::string why = unavailable(torch); !why.empty()) {                                \
    const char* ci = std::getenv("CI");                                                          \
    if (ci && std::string(ci) == "true") FAIL() << "CI must run the " << torch << " cases: " << why; \
    GTEST_SKIP() << why << ": " << torch << " case skipped";                                     \
  }

std::string python_for(const std::string& torch) { return torch == "torch1.13" ? "/usr/bin/python3" : torch2_python(); }

std::string tail(const std::string& s) { return s.substr(s.size() > 3000 ? s.size() - 3000 : 0); }

std::string torch_name(const std::string& torch) { return torch == "torch2" ? "torch2" : "torch1_13"; }

class Faults : public ::testing::TestWithParam<std::string> {};

TEST_P(Faults, EachFaultStopsTheRecordingNotTheRun) {
  const std::string torch = GetParam();
  SKIP_UNLESS_AVAILABLE(torch);
  const auto r = testing::run_command({"/usr/bin/timeout", "400", python_for(torch), "tests/ddp_check/recorder_faults.py"});
  std::printf("%s", r.out.c_str());
  ASSERT_EQ(r.status, 0) << tail(r.err);
  EXPECT_NE(r.out.find("cases hold"), std::string::npos);
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos);
  for (const char* c : {"parameter_hook", "unknown_tensor_kind", "disk_full", "disk_full_log", "unwritable_run_dir", "dataloader_index_spy",
                        "join_spy", "averaging_spy", "close", "closure_raises", "comm_hook_kinds", "zero_grad_wrapper",
                        "model_unwrap"})
    EXPECT_NE(r.out.find(std::string("ok   ") + c + " "), std::string::npos) << c;
}

// The step files are written off the training thread, with O_DIRECT where the file system takes it (bench/README.md
// says why): the bytes on disk are the bytes given, for sizes around the page, with O_DIRECT, buffered, and after
// the file system refuses O_DIRECT; a failed write is reported to the training's thread and leaves no file.
TEST(StepWriter, WritesTheBytesGivenAndReportsAFailure) {
  const auto r = testing::run_command({"/usr/bin/timeout", "120", "/usr/bin/python3", "tests/ddp_check/step_writer.py"});
  std::printf("%s", r.out.c_str());
  ASSERT_EQ(r.status, 0) << tail(r.err);
  EXPECT_NE(r.out.find("all cases hold"), std::string::npos);
  for (const char* c : {"direct", "buffered", "refused", "failure"})
    EXPECT_NE(r.out.find(std::string("ok   ") + c + " "), std::string::npos) << c;
}

// The recorder's digest (fold64) is the one docs/trace_format.md defines, on both torches; and what the whole-run
// mode relies on.
TEST_P(Faults, TheDigestIsAsDefined) {
  const std::string torch = GetParam();
  SKIP_UNLESS_AVAILABLE(torch);
  const auto r = testing::run_command({"/usr/bin/timeout", "120", python_for(torch), "tests/ddp_check/digest.py"});
  std::printf("%s", r.out.c_str());
  ASSERT_EQ(r.status, 0) << tail(r.err);
  EXPECT_NE(r.out.find("digests as defined"), std::string::npos);
  // The whole-run mode's NaN/inf flag, all-zero test, torch's version counter under .data, the sample's slots.
  EXPECT_NE(r.out.find("whole-run flags and sample checked"), std::string::npos);
  // A small model's whole-run steps laid flat (flat.py): what the per-tensor functions give.
  EXPECT_NE(r.out.find("flat layout as per tensor"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Torches, Faults, ::testing::Values("torch1.13", "torch2"),
                         [](const auto& info) { return torch_name(info.param); });

// A script run traced and untraced: every rank's final parameters (blake2b per tensor, common.py's --final .json)
// equal, and the traced run's manifest as `expect` says.
struct Unchecked {
  const char* script;
  int params, unchecked;  // recorded and unchecked parameters
  const char* why;        // every unchecked parameter's reason
  int unchecked_buffers;
};

const Unchecked kUnchecked[] = {
    {"sparse_embedding", 4, 1, "sparse gradient", 0},
    {"float64_model", 0, 6, "float64 parameter", 2},
};

class UncheckedParams : public ::testing::TestWithParam<std::tuple<std::string, Unchecked>> {};

TEST_P(UncheckedParams, RecordedAroundAndBitwiseAsUntraced) {
  const auto& [torch, c] = GetParam();
  SKIP_UNLESS_AVAILABLE(torch);
  const std::string dir = testing::temp_dir(), script = std::string("tests/ddp_check/scripts/") + c.script + ".py";
  const auto plain = testing::run_command({"/usr/bin/timeout", "300", python_for(torch), script, "--no-trace", "--final",
                                           dir + "/plain.json"});
  ASSERT_EQ(plain.status, 0) << tail(plain.err);
  const auto traced = testing::run_command({"/usr/bin/timeout", "300", python_for(torch), script, "--out", dir + "/run",
                                            "--final", dir + "/traced.json"});
  ASSERT_EQ(traced.status, 0) << tail(traced.err);
  EXPECT_EQ(traced.err.find("ddplab_trace:"), std::string::npos) << tail(traced.err);
  EXPECT_EQ(testing::load_json(dir + "/traced.json"), testing::load_json(dir + "/plain.json"))
      << c.script << ": the traced run's final parameters differ from the untraced run's";
  for (int rank = 0; rank < 2; ++rank) {
    const json m = testing::load_json(dir + "/run/rank" + std::to_string(rank) + "/manifest.json");
    EXPECT_EQ(m["complete"], true);
    EXPECT_TRUE(m["stopped"].is_null()) << m["stopped"].dump();
    EXPECT_EQ(m["steps"], json({0, 1, 2, 3}));
    EXPECT_EQ(m["params"].size(), static_cast<size_t>(c.params));
    ASSERT_EQ(m["unchecked_params"].size(), static_cast<size_t>(c.unchecked)) << m["unchecked_params"].dump();
    for (const json& u : m["unchecked_params"]) EXPECT_EQ(u["why"], c.why) << u.dump();
    EXPECT_EQ(m["unchecked_buffers"].size(), static_cast<size_t>(c.unchecked_buffers));
    EXPECT_EQ(m["optimizer"]["missing_params"], json::array());
    EXPECT_EQ(m["optimizer"]["missing_unchecked"], json::array());
    EXPECT_EQ(m["optimizer"]["foreign_params"], 0);
    // Indices refer to "params" only: the ready order holds every recorded parameter once.
    EXPECT_EQ(m["first_ready_order"].size(), static_cast<size_t>(c.params));
    const json d = testing::load_json(dir + "/run/rank" + std::to_string(rank) + "/data.json");
    ASSERT_EQ(d["loaders"].size(), 1u);
    EXPECT_EQ(d["loaders"][0]["sampler"]["rank"], rank);
    EXPECT_EQ(d["loaders"][0]["epochs"][0]["indices"].size(), 16u);  // 4 steps of 4 samples
  }
}

INSTANTIATE_TEST_SUITE_P(Scripts, UncheckedParams,
                         ::testing::Combine(::testing::Values("torch1.13", "torch2"), ::testing::ValuesIn(kUnchecked)),
                         [](const auto& info) {
                           return torch_name(std::get<0>(info.param)) + "_" + std::get<1>(info.param).script;
                         });

// A small CPU model's whole-run steps taken by _fast.c and by numpy (a machine without a C compiler: fast.py falls
// back to flat.py) give the same records (metadata, sample bit for bit, weighted sums to float64's rounding), and
// ddp_check finds either run as predicted.
TEST(WholeRun, FastAndNumpyRecordsAgree) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const std::string dir = testing::temp_dir();
  const auto r = testing::run_command({"/usr/bin/timeout", "600", "/usr/bin/python3", "tests/ddp_check/whole_run_paths.py", dir});
  std::printf("%s", r.out.c_str());
  ASSERT_EQ(r.status, 0) << r.out << tail(r.err);
  EXPECT_NE(r.out.find("whole-run records of _fast.c and numpy agree: 45 records"), std::string::npos) << r.out;
  for (const char* way : {"/fast", "/numpy"}) {
    const auto check = testing::run_command({"verify/ddp_check", dir + way});
    EXPECT_EQ(check.status, 0) << way << "\n" << check.out << check.err;
    EXPECT_NE(check.out.find("verdict: as-predicted"), std::string::npos) << way << "\n" << check.out;
  }
}

// The recorder as a learner installs it: `pip install ./verify` (a copy of verify/'s package and pyproject.toml,
// offline: --no-build-isolation) into a directory of its own; a script with the documented lines and no sys.path
// line imports it from there, and ddp_check finds the run as predicted.
TEST(PipInstall, TheInstalledPackageTracesARun) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  const std::string dir = testing::temp_dir(), src = dir + "/src", site = dir + "/site", run = dir + "/run";
  ASSERT_EQ(testing::run_command({"/bin/mkdir", "-p", src}).status, 0);
  ASSERT_EQ(testing::run_command({"/bin/cp", "-rL", "verify/ddplab_trace", "verify/pyproject.toml", src}).status, 0);
  const auto pip = testing::run_command({"/usr/bin/python3", "-m", "pip", "install", "--quiet", "--no-build-isolation",
                                         "--no-deps", "--no-index", "--target", site, src});
  ASSERT_EQ(pip.status, 0) << pip.out << pip.err;
  const auto traced = testing::run_command({"/usr/bin/env", "PYTHONPATH=" + site, "DDPLAB_START_METHOD=fork",
                                            "/usr/bin/python3", "tests/ddp_check/pip_installed.py", run});
  ASSERT_EQ(traced.status, 0) << traced.err;
  EXPECT_NE(traced.out.find("ddplab_trace from " + site), std::string::npos) << traced.out;
  EXPECT_NE(traced.out.find("_fast.c compiled: True"), std::string::npos) << traced.out;
  const auto check = testing::run_command({"verify/ddp_check", run, "--quiet"});
  EXPECT_EQ(check.status, 0) << check.out << check.err;
}

// tests/ddp_check/scripts/lightning_strategies.py: 2 CPU ranks, 2 epochs of 4 steps, LightningCallback.
class Lightning : public ::testing::TestWithParam<std::string> {};

TEST_P(Lightning, EveryRankLeavesACompleteTrace) {
  const std::string strategy = GetParam();
  SKIP_UNLESS_AVAILABLE(std::string("torch2"));
  const std::string dir = testing::temp_dir() + "/run";
  const auto run = testing::run_command({"/usr/bin/timeout", "300", torch2_python(),
                                         "tests/ddp_check/scripts/lightning_strategies.py", "--strategy", strategy,
                                         "--out", dir});
  ASSERT_EQ(run.status, 0) << strategy << ": " << tail(run.err);
  EXPECT_EQ(run.err.find("ddplab_trace:"), std::string::npos) << tail(run.err);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string rd = dir + "/rank" + std::to_string(rank);
    ASSERT_EQ(access((rd + "/manifest.json").c_str(), R_OK), 0) << strategy << ": rank " << rank << " left no manifest";
    const json m = testing::load_json(rd + "/manifest.json");
    EXPECT_EQ(m["complete"], true);
    EXPECT_TRUE(m["stopped"].is_null()) << m["stopped"].dump();
    EXPECT_EQ(m["rank"], rank);
    EXPECT_EQ(m["world_size"], 2);
    EXPECT_EQ(m["lightning"]["strategy"], strategy);
    EXPECT_EQ(m["steps"], json({0, 1, 2, 3, 4, 5, 6, 7}));
    const json d = testing::load_json(rd + "/data.json");  // Lightning's own DistributedSampler, read
    ASSERT_EQ(d["loaders"].size(), 1u);
    EXPECT_EQ(d["loaders"][0]["sampler"]["type"], "DistributedSampler");
    EXPECT_EQ(d["loaders"][0]["sampler"]["rank"], rank);
    EXPECT_EQ(d["loaders"][0]["epochs"].size(), 2u);
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, Lightning, ::testing::Values("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook"));

}  // namespace
}  // namespace ddplab
