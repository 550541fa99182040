// //sim:two_replica end to end against notebook 000's PyTorch code (notebooks_ported/000_two_replica/
// reference.py): goldens for several configurations, a live run on one more, and every kind of bad input.
#include <dirent.h>
#include <sys/stat.h>

#include <fstream>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::CommandResult;
using testing::json;
using testing::run_command;

const std::string kBinary = "sim/two_replica";

CommandResult two_replica(std::vector<std::string> args) {
  args.insert(args.begin(), kBinary);
  return run_command(args);
}

// Compares one model ({W1, b1, W2, b2}) of a C++ dump with PyTorch's; returns true when all bitwise equal.
bool compare_model(const std::string& label, const json& got, const json& want, bool require_exact) {
  bool all_exact = true;
  for (const char* name : {"W1", "b1", "W2", "b2"}) {
    const auto m = testing::match(label + " " + name, testing::floats(got[name]), testing::floats(want[name]));
    EXPECT_TRUE(m.allclose) << label << " " << name;
    if (require_exact) {
      EXPECT_EQ(m.equal, m.total) << label << " " << name << " must be bit-exact";
    }
    all_exact = all_exact && m.equal == m.total;
  }
  return all_exact;
}

void compare_dumps(const std::string& label, const json& got, const json& want) {
  compare_model(label + " initial", got["initial"], want["initial"], /*require_exact=*/true);
  ASSERT_EQ(got["replicas"].size(), want["replicas"].size());
  for (size_t k = 0; k < want["replicas"].size(); ++k) {
    compare_model(label + " replica " + std::to_string(k), got["replicas"][k], want["replicas"][k], false);
  }
  compare_model(label + " one_device", got["one_device"], want["one_device"], false);
  const double loss = got["train_loss"], want_loss = want["train_loss"];
  EXPECT_NEAR(loss, want_loss, 1e-5 * std::abs(want_loss)) << label;
}

json run_and_dump(const std::vector<std::string>& args) {
  const std::string out = testing::temp_dir() + "/dump.json";
  std::vector<std::string> full = args;
  full.push_back("--dump-params");
  full.push_back(out);
  const CommandResult r = two_replica(full);
  EXPECT_EQ(r.status, 0) << r.err;
  return testing::load_json(out);
}

TEST(TwoReplica, MatchesPyTorchGoldens) {
  const json configs = testing::load_json("tests/golden/two_replica/configs.json");
  ASSERT_GE(configs.size(), 4u);
  for (const auto& [name, args] : configs.items()) {
    compare_dumps(name, run_and_dump(args.get<std::vector<std::string>>()),
                  testing::load_json("tests/golden/two_replica/" + name + ".json"));
  }
}

TEST(TwoReplica, PrintsTheNotebookLines) {
  const CommandResult r = two_replica({});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* line :
       {"epoch 1 | train_loss=2.1911\n", "x_0.shape: torch.Size([32, 6]), y_0.shape: torch.Size([32, 2])\n",
        "x_1.shape: torch.Size([32, 6]), y_1.shape: torch.Size([32, 2])\n",
        "W1              | exact: True  | approximate: True  | maxdiff: 0.0\n",
        "b2              | exact: True  | approximate: True  | maxdiff: 0.0\n"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << "missing: " << line << "in:\n" << r.out;
  }
}

TEST(TwoReplica, LiveAgainstReferencePy) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: live PyTorch check skipped";
  // A configuration no golden covers: odd sizes, three replicas, a short last batch in the epoch.
  const std::vector<std::string> args = {"--replicas",     "3", "--seed",        "99",  "--samples", "50",
                                         "--batch-size",   "7", "--in-features", "9",   "--hidden",  "5",
                                         "--out-features", "3", "--lr",          "0.05"};
  const std::string ref_out = testing::temp_dir() + "/ref.json";
  std::vector<std::string> ref = {"/usr/bin/python3", "notebooks_ported/000_two_replica/reference.py"};
  ref.insert(ref.end(), args.begin(), args.end());
  ref.push_back("--dump-params");
  ref.push_back(ref_out);
  const CommandResult py = run_command(ref);  // not run_oracle: its printed lines are compared below
  ASSERT_EQ(py.status, 0) << py.err;
  compare_dumps("live", run_and_dump(args), testing::load_json(ref_out));
  // The printed epoch line and shapes agree too.
  const CommandResult cpp = two_replica(args);
  for (const std::string& key : {std::string("epoch 1 | train_loss="), std::string("x_2.shape:")}) {
    const auto line = [&](const std::string& s) {
      return s.substr(s.find(key), s.find('\n', s.find(key)) - s.find(key));
    };
    ASSERT_NE(py.out.find(key), std::string::npos);
    EXPECT_EQ(line(cpp.out), line(py.out));
  }
}

struct BadInput {
  std::vector<std::string> args;
  std::string expect;  // a fragment of the one-line message
};

TEST(TwoReplica, BadInputGetsOneLineAndExit2) {
  const std::vector<BadInput> cases = {
      {{"--bogus", "1"}, "unknown flag --bogus"},
      {{"--replicas"}, "--replicas needs a value"},
      {{"--replicas", "two"}, "--replicas must be an integer (got 'two')"},
      {{"--replicas", "0"}, "--replicas must be in [1, 1024] (got 0)"},
      {{"--batch-size", "-3"}, "--batch-size must be in"},
      {{"--samples", "0"}, "--samples must be in"},
      {{"--hidden", "0"}, "--hidden must be in"},
      {{"--in-features", "1e3"}, "--in-features must be an integer"},
      {{"--lr", "fast"}, "--lr must be a finite number"},
      {{"--lr", "-0.1"}, "--lr must be in"},
      {{"--replicas", "3"}, "--replicas * --batch-size must be <= --samples"},
      {{"--dump-params", "/nonexistent-dir/x.json"}, "--dump-params: directory '/nonexistent-dir' does not exist"},
      {{"--threads", "-1"}, "--threads must be in [0, 256] (got -1)"},
      {{"extra"}, "unexpected argument 'extra'"},
  };
  for (const BadInput& c : cases) {
    const CommandResult r = two_replica(c.args);
    EXPECT_EQ(r.status, 2) << c.expect;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << "stderr: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line, got: " << r.err;
    EXPECT_TRUE(r.out.empty()) << "nothing on stdout for bad input, got: " << r.out;
  }
}

// --threads: replicas side by side; the dump must be the same bytes for 1, 2 and 3 threads (8 replicas
// of a model large enough that the work is really split).
TEST(TwoReplica, ThreadsChangeNoBit) {
  std::vector<std::string> dumps;
  for (const char* threads : {"1", "2", "3"}) {
    const std::string path = testing::temp_dir() + "/params.json";
    const CommandResult r =
        two_replica({"--replicas", "8", "--samples", "512", "--batch-size", "64", "--in-features", "128", "--hidden",
                     "256", "--out-features", "16", "--threads", threads, "--dump-params", path});
    ASSERT_EQ(r.status, 0) << r.err;
    std::ifstream in(path);
    dumps.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  EXPECT_FALSE(dumps[0].empty());
  EXPECT_EQ(dumps[1], dumps[0]);
  EXPECT_EQ(dumps[2], dumps[0]);
}

TEST(TwoReplica, DumpIsAtomic) {
  const std::string dir = testing::temp_dir();
  const std::string path = dir + "/params.json";
  { std::ofstream(path) << "old"; }
  // A run refused for bad input leaves an existing file untouched.
  EXPECT_EQ(two_replica({"--replicas", "5", "--dump-params", path}).status, 2);
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "old");
  // A successful run replaces it whole and leaves no temporary file behind.
  ASSERT_EQ(two_replica({"--dump-params", path}).status, 0);
  EXPECT_NO_THROW(testing::load_json(path));
  int entries = 0;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) entries += e->d_name[0] != '.';
  closedir(d);
  EXPECT_EQ(entries, 1);
}

}  // namespace
}  // namespace ddplab
