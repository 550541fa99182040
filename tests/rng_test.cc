// //sim:rng prints what torch.manual_seed(S); torch.<kind>(N) gives, one value per line, and refuses bad
// input with one line and status 2.
#include <sstream>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(RngCli, PrintsTorchsDraws) {
  // The same golden rng_test uses: torch.manual_seed(12345); torch.randn(N) for N = 20 (vectorized path).
  const auto g = testing::load_json("tests/golden/rng.json");
  int checked = 0;
  for (const auto& c : g["randn"]) {
    if (c["seed"] != 12345 || (c["n"] != 6 && c["n"] != 20)) continue;
    const auto r = testing::run_command({"sim/rng", "--seed", "12345", "randn", c["n"].dump()});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto got = lines(r.out);
    const auto want = testing::floats(c["values"]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(std::stof(got[i]), want[i]) << "line " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  const auto perm = testing::run_command({"sim/rng", "--seed", "3", "randperm", "3"});
  EXPECT_EQ(lines(perm.out).size(), 3u);
}

TEST(RngCli, BadInput) {
  for (const auto& [args, expect] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"randn"}, "expected two arguments"},
           {{"gauss", "3"}, "kind must be randn, rand or randperm"},
           {{"randn", "-1"}, "N must be in [0, 100000000]"},
           {{"randn", "x"}, "N must be an integer"},
           {{"--seed", "-2", "randn", "3"}, "--seed must be in"},
       }) {
    std::vector<std::string> cmd = {"sim/rng"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    const auto r = testing::run_command(cmd);
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace ddplab
