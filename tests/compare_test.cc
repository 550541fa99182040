// cmp() verdicts against torch.allclose / torch.all(==), and maxdiff printed as Python prints it
// (tests/golden/compare.json).
#include "src/compare.h"

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

}  // namespace
}  // namespace ddplab
