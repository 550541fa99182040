// Helpers shared by the tests: golden files, float lists, child processes, and llm.c-style reports.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddplab::testing {

using nlohmann::json;

// Reads a JSON file relative to the runfiles root (the workspace directory bazel test starts in).
json load_json(const std::string& path);
std::vector<float> floats(const json& j);  // flattens nested lists of numbers into float32
std::vector<int64_t> ints(const json& j);  // flattens nested lists of integers

struct CommandResult {
  int status = -1;  // exit status, or -1 when killed by a signal
  std::string out, err;
  long max_rss_kb = 0;  // the child's peak resident set (getrusage's ru_maxrss)
};
// Runs argv[0] with arguments, no shell; captures stdout and stderr.
CommandResult run_command(const std::vector<std::string>& argv);

// An oracle's run whose only product is the file `out`, a pure function of argv and of the files in `inputs`
// (the reference scripts it runs): where DDPLAB_ORACLE_CACHE names a directory (CI sets one per run, shared by
// its sanitized and plain phases, which would run the same torch commands twice), a run with the same argv and
// inputs is done once and `out` copied from its first result. Without it, like run_command. A failed run is
// never kept.
CommandResult run_oracle(const std::vector<std::string>& argv, const std::vector<std::string>& inputs,
                         const std::string& out);

// True when /usr/bin/python3 can import torch (the live PyTorch checks need it).
bool torch_available();
// The oracles ddp_check's real runs use: "torch1.13" (Debian's /usr/bin/python3) and "torch2" (the virtual
// environment of tools/install_deps.sh --with-torch2, $DDPLAB_TORCH2_VENV or /opt/ddplab-torch2).
std::string torch2_python();
std::string python_for(const std::string& torch);
// "" when `torch`'s python can import torch, else why not.
std::string torch_unavailable(const std::string& torch);
// Skips with the reason where that torch is absent, and fails in CI (CI=true), which must run every oracle.
#define DDPLAB_SKIP_UNLESS_TORCH(torch)                                                               \
  if (const std::string why_ = ::ddplab::testing::torch_unavailable(torch); !why_.empty()) {           \
    const char* ci_ = std::getenv("CI");                                                               \
    if (ci_ && std::string(ci_) == "true") FAIL() << "CI must run the " << torch << " cases: " << why_; \
    GTEST_SKIP() << why_ << ": " << torch << " case skipped";                                          \
  }

// A TCP socket bound to an ephemeral port on 127.0.0.1 (`type_flags` e.g. SOCK_NONBLOCK); *port gets it.
int bind_loopback(int type_flags, int* port);
// A port on 127.0.0.1 that was free a moment ago (for a server the test starts).
int free_port();
// Waits up to `seconds` until something accepts connections on 127.0.0.1:`port` (a server the test
// started): a fixed sleep was too short on a loaded machine. Whether it came up in time.
bool wait_for_listener(int port, double seconds);

// A fresh empty directory under TEST_TMPDIR.
std::string temp_dir();

// Counts how many floats are bitwise equal, and the largest absolute difference; prints a line like
// "randn seed=1 n=17: 17/17 bitwise equal, maxdiff 0" so a test log shows what matched and by how much.
struct Match {
  int64_t equal = 0, total = 0;
  double maxdiff = 0.0;
  bool allclose = true;  // torch.allclose(a, b) with b the reference
};
Match match(const std::string& label, const std::vector<float>& got, const std::vector<float>& want, double rtol = 1e-5,
            double atol = 1e-8);

// How two float lists agree bit for bit: how many are bit-identical, and the largest distance in ulps among
// the others (at least 1 when any differs: 0 and -0, or NaN payloads). sizes_match false: nothing compared.
struct Bits {
  bool sizes_match = true;
  int64_t equal = 0, total = 0, worst = 0;
  bool exact() const { return sizes_match && equal == total; }
};
Bits bits(const std::vector<float>& got, const std::vector<float>& want);
// bits(), printed as "<label padded to width> exact yes N/N bitwise, max ulps K" (or the sizes) when `print`.
Bits print_bits(const std::string& label, const std::vector<float>& got, const std::vector<float>& want, int width,
                bool print = true);

// The largest distance in units in the last place between got[i] and want[i] (float32 bit patterns ordered
// as integers; +0 and -0 are 0 apart; a size mismatch or a NaN against a number counts as INT64_MAX).
int64_t max_ulps(const std::vector<float>& got, const std::vector<float>& want);

// `sim/ddp_sim ARGS --quiet --dump-params FILE` (the run must succeed), and the dump.
json sim_dump(std::vector<std::string> args);
// EXPECTs every float of every named tensor in `want` equal in bits to `got`'s (integers, such as
// num_batches_tracked, equal as integers); `label` prefixes the failures and the printed match lines.
void expect_bitwise(const std::string& label, const json& got, const json& want);
// A ddp_sim/ddp_verify dump against torch's (sim/ddp_reference.py's): the sampler's indices, and every rank's
// parameters, buffers and losses bitwise, and the test predictions (absent in both without a test set).
void expect_dump_bitwise(const std::string& label, const json& got, const json& torch);

}  // namespace ddplab::testing
