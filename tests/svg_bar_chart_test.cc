// svg::bar_chart (lab 007's --report): bar lengths proportional to the values on a linear axis, decades on a
// log one, no bar for a zero on the log axis, every label escaped.
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "src/report/svg.h"

namespace ddplab {
namespace {

// The width attribute of every <rect> in order.
std::vector<double> widths(const std::string& svg) {
  std::vector<double> w;
  const std::regex re("<rect [^>]*width=\"([0-9.]+)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it) {
    w.push_back(std::stod((*it)[1]));
  }
  return w;
}

TEST(SvgBarChart, LinearBarsAreProportional) {
  const std::string s = svg::bar_chart({{"a", 2000, "", ""}, {"b", 4000, "", ""}, {"<c>", 0, "none", ""}}, "floats");
  const std::vector<double> w = widths(s);
  ASSERT_EQ(w.size(), 3u) << s;
  EXPECT_NEAR(w[1], 2 * w[0], 0.2);
  EXPECT_EQ(w[2], 0.0);
  EXPECT_NE(s.find("&lt;c&gt;"), std::string::npos);
  EXPECT_EQ(s.find("<c>"), std::string::npos);
  EXPECT_NE(s.find(">floats</text>"), std::string::npos);
}

TEST(SvgBarChart, LogBarsSpanDecades) {
  const std::string s = svg::bar_chart({{"zero", 0, "0", ""}, {"small", 1e-4, "", ""}, {"big", 1e-1, "", ""}},
                                       "max |diff|", /*log_scale=*/true);
  const std::vector<double> w = widths(s);
  ASSERT_EQ(w.size(), 3u) << s;
  EXPECT_EQ(w[0], 0.0) << "no bar for a value the log axis cannot show";
  EXPECT_NEAR(w[1], 0.0, 1.01) << "1e-4 is the axis' first decade";
  EXPECT_GT(w[2], 500.0) << "1e-1 is its last";
  for (const char* tick : {">1e-4<", ">1e-3<", ">1e-2<", ">1e-1<"}) EXPECT_NE(s.find(tick), std::string::npos) << tick;
}

}  // namespace
}  // namespace ddplab
