// The notebook's cmp(): are two tensors exactly equal, approximately equal (torch.allclose), and by how much
// do they differ.
#pragma once

#include <cstdint>
#include <string>

namespace ddplab {

struct CmpResult {
  std::string name;
  bool exact = false;        // torch.all(a == b)
  bool approximate = false;  // torch.allclose(a, b, rtol, atol), b the reference
  float maxdiff = 0.0f;      // (a - b).abs().max(), in float32 like the tensors
  int64_t numel = 0;
  int64_t num_different = 0;  // elements whose bits differ (a != b)
  // The largest ulp_distance between a[i] and b[i]: cmp() counts it from the tensors it compares, so
  // that a table of these rows needs no second pass; -1 when a result was assembled by hand.
  int64_t max_ulps = -1;
};

// rtol/atol default to torch.allclose's 1e-5 / 1e-8; the test is |a - b| <= atol + |rtol * b| in float32.
CmpResult cmp(const std::string& name, const float* a, const float* b, int64_t n, double rtol = 1e-5,
              double atol = 1e-8);

// The notebook's line: f'{s:15s} | exact: {str(ex):5s} | approximate: {str(app):5s} | maxdiff: {maxdiff}'
std::string format_cmp(const CmpResult& r);

// How many float32 values lie between a and b (0 when equal, +0 and -0 included: both map to 0).
int64_t ulp_distance(float a, float b);

// Python's repr() of a float (shortest round-trip digits; '0.0', '1e-07', '1.1920928955078125e-07').
std::string python_float_repr(double v);

}  // namespace ddplab
