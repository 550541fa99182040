// Scalar, lane-by-lane rewrite of the Cephes float polynomials PyTorch's AVX2 randn kernel uses.
// Every std::fma below stands where GCC fused a multiply with the add or subtract that consumes it
// (a product is fused into its only consumer when that consumer is an add/sub, first product first).
#include "src/tensor/cephes_f32.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ddplab::cephes {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Polynomial coefficients of Cephes' logf, sinf and cosf (the values avx_mathfun.h uses).
constexpr float kSqrtHalf = 0.707106781186547524f;
constexpr float kLogP[9] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                            -1.2420140846E-1f, +1.4249322787E-1f, -1.6668057665E-1f,
                            +2.0000714765E-1f, -2.4999993993E-1f, +3.3333331174E-1f};
constexpr float kLogQ1 = -2.12194440e-4f;
constexpr float kLogQ2 = 0.693359375f;

constexpr float kMinusDP1 = -0.78515625f;
constexpr float kMinusDP2 = -2.4187564849853515625e-4f;
constexpr float kMinusDP3 = -3.77489497744594108e-8f;
constexpr float kSinP[3] = {-1.9515295891E-4f, 8.3321608736E-3f, -1.6666654611E-1f};
constexpr float kCosP[3] = {2.443315711809948E-005f, -1.388731625493765E-003f, 4.166664568298827E-002f};
constexpr float kFourOverPi = 1.27323954473516f;

}  // namespace

float log_ps(float x) {
  const bool invalid = !(x > 0.0f);
  x = std::fmax(x, from_bits(0x00800000u));  // cut off denormals at FLT_MIN
  int32_t exponent = static_cast<int32_t>(bits(x) >> 23);
  x = from_bits((bits(x) & ~0x7f800000u) | bits(0.5f));  // mantissa in [0.5, 1)
  float e = static_cast<float>(exponent - 0x7f);
  e = e + 1.0f;
  // if (x < sqrt(1/2)) { e -= 1; x = x + x - 1; } else { x = x - 1; }
  const bool below = x < kSqrtHalf;
  const float tmp = below ? x : 0.0f;
  x = x - 1.0f;
  e = e - (below ? 1.0f : 0.0f);
  x = x + tmp;

  const float z = x * x;
  float y = kLogP[0];
  for (int i = 1; i < 9; ++i) y = std::fma(y, x, kLogP[i]);
  y = y * x;
  y = std::fma(y, z, e * kLogQ1);  // y*z + e*q1: the first product is the fused one
  y = std::fma(-z, 0.5f, y);       // y - z*0.5
  x = x + y;
  x = std::fma(e, kLogQ2, x);
  return invalid ? from_bits(bits(x) | 0xffffffffu) : x;
}

void sincos_ps(float x, float* s, float* c) {
  uint32_t sign_sin = bits(x) & 0x80000000u;
  x = from_bits(bits(x) & 0x7fffffffu);

  // j = nearest even integer to x * 4/pi (Cephes' octant), computed by truncation then (j + 1) & ~1.
  int32_t j = static_cast<int32_t>(x * kFourOverPi);
  j = (j + 1) & ~1;
  const float yj = static_cast<float>(j);
  const uint32_t swap_sign_sin = static_cast<uint32_t>(j & 4) << 29;
  const bool sin_poly_for_sin = (j & 2) == 0;
  const uint32_t sign_cos = static_cast<uint32_t>(~(j - 2) & 4) << 29;
  sign_sin ^= swap_sign_sin;

  // Extended precision modular arithmetic: x = ((x - j*DP1) - j*DP2) - j*DP3, each step fused.
  x = std::fma(yj, kMinusDP1, x);
  x = std::fma(yj, kMinusDP2, x);
  x = std::fma(yj, kMinusDP3, x);

  const float z = x * x;
  float yc = kCosP[0];
  yc = std::fma(yc, z, kCosP[1]);
  yc = std::fma(yc, z, kCosP[2]);
  yc = yc * z;
  yc = std::fma(yc, z, -(z * 0.5f));  // yc*z - z*0.5: the first product is the fused one
  yc = yc + 1.0f;

  float ys = kSinP[0];
  ys = std::fma(ys, z, kSinP[1]);
  ys = std::fma(ys, z, kSinP[2]);
  ys = ys * z;
  ys = std::fma(ys, x, x);

  // Blend exactly as the vector code does (and/andnot, then adds), so signed zeros come out the same.
  const float ysin2 = sin_poly_for_sin ? ys : 0.0f;
  const float ysin1 = sin_poly_for_sin ? 0.0f : yc;
  ys = ys - ysin2;
  yc = yc - ysin1;
  *s = from_bits(bits(ysin1 + ysin2) ^ sign_sin);
  *c = from_bits(bits(yc + ys) ^ sign_cos);
}

}  // namespace ddplab::cephes
