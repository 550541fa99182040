// cmp() verdicts against torch.allclose / torch.all(==), and maxdiff printed as Python prints it
// (tests/golden/compare.json).
#include "src/base/compare.h"

#include <cmath>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

TEST(Cmp, AgreesWithTorchOnExactApproximateAndMaxdiff) {
  const auto g = testing::load_json("tests/golden/compare.json");
  for (const auto& c : g["pairs"]) {
    const auto a = testing::floats(c["a"]), b = testing::floats(c["b"]);
    const CmpResult r = cmp("x", a.data(), b.data(), static_cast<int64_t>(a.size()));
    EXPECT_EQ(r.exact, c["exact"].get<bool>());
    EXPECT_EQ(r.approximate, c["approximate"].get<bool>());
    EXPECT_EQ(static_cast<double>(r.maxdiff), c["maxdiff"].get<double>());
  }
}

TEST(Cmp, PythonReprOfFloat32Values) {
  const auto g = testing::load_json("tests/golden/compare.json");
  for (const auto& c : g["reprs"]) {
    const float v = static_cast<float>(c["value"].get<double>());
    EXPECT_EQ(python_float_repr(v), c["repr"].get<std::string>()) << c["value"];
  }
}

TEST(Cmp, NotebookLineFormat) {
  const float a[2] = {1.0f, 2.0f}, b[2] = {1.0f, 2.0f};
  EXPECT_EQ(format_cmp(cmp("W1", a, b, 2)), "W1              | exact: True  | approximate: True  | maxdiff: 0.0");
  const float c[2] = {1.0f, 2.5f};
  EXPECT_EQ(format_cmp(cmp("b2", a, c, 2)), "b2              | exact: False | approximate: False | maxdiff: 0.5");
}

TEST(Cmp, NanIsNeitherExactNorClose) {
  const float a[1] = {std::nanf("")}, b[1] = {std::nanf("")};
  const CmpResult r = cmp("n", a, b, 1);
  EXPECT_FALSE(r.exact);
  EXPECT_FALSE(r.approximate);
}

// The reports' "max ulps" column comes from cmp() itself (the labs' tables printed "?" before).
TEST(Cmp, CountsTheLargestDistanceInUlps) {
  const float one_up = std::nextafter(1.0f, 2.0f), three_up = std::nextafter(std::nextafter(one_up, 2.0f), 2.0f);
  const float a[3] = {1.0f, 2.0f, -1.0f}, b[3] = {three_up, 2.0f, std::nextafter(-1.0f, -2.0f)};
  EXPECT_EQ(cmp("u", a, b, 3).max_ulps, 3);
  EXPECT_EQ(cmp("u", a + 1, b + 1, 2).max_ulps, 1) << "negative neighbours";
  EXPECT_EQ(cmp("u", a + 1, b + 1, 1).max_ulps, 0);
  EXPECT_EQ(cmp("u", a, b, 0).max_ulps, 0);
  EXPECT_EQ(CmpResult{}.max_ulps, -1) << "a result not from cmp() does not claim to know";
  EXPECT_EQ(ulp_distance(-0.0f, 0.0f), 0) << "equal floats are 0 apart, signed zeros too";
}

}  // namespace
}  // namespace ddplab
