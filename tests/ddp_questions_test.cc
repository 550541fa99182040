// ddp_questions' refusals: every topic compares several ranks with one device (or DDP with FSDP2), so at
// --world-size 1 each one refuses in one line naming the flag, exit status 2, and prints no answer.
#include <string>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

class WorldSizeOne : public ::testing::TestWithParam<std::string> {};

TEST_P(WorldSizeOne, RefusesInOneLine) {
  const testing::CommandResult r = testing::run_command({"sim/ddp_questions", GetParam(), "--world-size", "1"});
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_EQ(r.out.find("answer:"), std::string::npos) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;  // one line
  EXPECT_NE(r.err.find("--world-size 1"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Topics, WorldSizeOne,
                         ::testing::Values("loss-scale", "batch-size", "lr-scaling", "evaluation", "accumulation",
                                           "fsdp", "speed"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace ddplab
