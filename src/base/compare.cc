#include "src/base/compare.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

namespace ddplab {

CmpResult cmp(const std::string& name, const float* a, const float* b, int64_t n, double rtol, double atol) {
  CmpResult r;
  r.name = name;
  r.numel = n;
  r.exact = true;
  r.approximate = true;
  r.max_ulps = 0;
  const float frtol = static_cast<float>(rtol), fatol = static_cast<float>(atol);
  bool any_nan_diff = false;
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i], y = b[i];
    if (!(x == y)) {
      r.exact = false;
      ++r.num_different;
    }
    r.max_ulps = std::max(r.max_ulps, ulp_distance(x, y));
    const float err = std::fabs(x - y);
    const bool close = (x == y) || (std::isfinite(err) && err <= fatol + std::fabs(frtol * y));
    if (!close) r.approximate = false;
    if (std::isnan(err))
      any_nan_diff = true;
    else if (err > r.maxdiff)
      r.maxdiff = err;
  }
  if (any_nan_diff) r.maxdiff = std::nanf("");  // torch's max() propagates NaN
  return r;
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0.0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout rule: fixed notation for 1e-4 <= |v| < 1e16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t epos = sci.find('e');
  const int exp10 = std::atoi(sci.c_str() + epos + 1);
  std::string mant = sci.substr(0, epos);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp10 + 1) {
      out = digits + std::string(static_cast<size_t>(exp10 + 1) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp10 + 1)) + "." + digits.substr(static_cast<size_t>(exp10 + 1));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp10 < 0 ? '-' : '+', std::abs(exp10));
  }
  return neg ? "-" + out : out;
}

std::string format_cmp(const CmpResult& r) {
  return fmt::format("{:<15} | exact: {:<5} | approximate: {:<5} | maxdiff: {}", r.name, r.exact ? "True" : "False",
                     r.approximate ? "True" : "False", python_float_repr(static_cast<double>(r.maxdiff)));
}

int64_t ulp_distance(float a, float b) {
  // Map float bits onto a line where adjacent floats are adjacent integers (negative floats mirrored).
  const auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

}  // namespace ddplab
