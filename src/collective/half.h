// The 16-bit element types a communication hook puts on the wire: IEEE float16 (torch.float16, Gloo's
// gloo::float16, NCCL's ncclHalf) and bfloat16 (torch.bfloat16, ncclBfloat16), as their bit patterns.
// Conversions round to nearest even, as c10::Half and c10::BFloat16 do. Arithmetic on them is done in
// float and rounded back: float has at least 2p+2 bits for both (24 >= 2*11+2, 24 >= 2*8+2), so one add or
// divide in float rounded once equals the correctly rounded 16-bit operation, which is what Gloo's
// sum<float16> (F16C convert, add in float, convert back) and a float16 tensor's div_ compute.
#pragma once

#include <cstdint>
#include <cstring>

namespace ddplab {

struct Half {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// float -> float16, round to nearest even; overflow to inf; NaN -> 0x7E00 with the sign (c10's
// fp16_ieee_from_fp32_value: the rounding is done by float arithmetic on a scaled value).
inline Half to_half(float f) {
  const float scale_to_inf = bits_float(0x77800000u);   // 2^112
  const float scale_to_zero = bits_float(0x08800000u);  // 2^-110
  const uint32_t w = float_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  float base = (bits_float(w & 0x7FFFFFFFu) * scale_to_inf) * scale_to_zero;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = bits_float((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = float_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return {static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign))};
}

// float16 -> float: exact; a NaN keeps its payload and comes out quiet (c10 converts with a float multiply,
// the AVX2 kernel with F16C: both quiet a signalling NaN, e.g. 0x7C0C -> 0x7FC18000).
inline float to_float(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t e = (h.bits >> 10) & 0x1Fu, m = h.bits & 0x3FFu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
    const float v = static_cast<float>(m) * bits_float(0x33800000u);
    return bits_float(float_bits(v) | sign);
  }
  if (e == 31) return bits_float(sign | 0x7F800000u | (m << 13) | (m != 0 ? 0x00400000u : 0u));
  return bits_float(sign | ((e + 112) << 23) | (m << 13));
}

// float -> bfloat16, round to nearest even; NaN -> 0x7FC0 (c10::BFloat16's round_to_nearest_even).
inline BFloat16 to_bfloat16(float f) {
  if (f != f) return {0x7FC0u};
  const uint32_t u = float_bits(f);
  const uint32_t rounding_bias = ((u >> 16) & 1u) + 0x7FFFu;
  return {static_cast<uint16_t>((u + rounding_bias) >> 16)};
}
inline float to_float(BFloat16 b) { return bits_float(static_cast<uint32_t>(b.bits) << 16); }

// One rounded operation each, as the 16-bit types compute them (see the header comment).
inline Half operator+(Half a, Half b) { return to_half(to_float(a) + to_float(b)); }
inline Half operator/(Half a, Half b) { return to_half(to_float(a) / to_float(b)); }
inline BFloat16 operator+(BFloat16 a, BFloat16 b) { return to_bfloat16(to_float(a) + to_float(b)); }
inline BFloat16 operator/(BFloat16 a, BFloat16 b) { return to_bfloat16(to_float(a) / to_float(b)); }

}  // namespace ddplab
