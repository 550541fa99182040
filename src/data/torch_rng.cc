#include "src/data/torch_rng.h"

#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "src/tensor/cephes_f32.h"

namespace ddplab {

void Generator::manual_seed(uint64_t seed) {
  // MT19937 init_genrand with the low 32 bits, as at::mt19937(seed) does.
  state_[0] = static_cast<uint32_t>(seed & 0xffffffffu);
  for (int j = 1; j < kN; ++j) {
    state_[j] = 1812433253u * (state_[j - 1] ^ (state_[j - 1] >> 30)) + static_cast<uint32_t>(j);
  }
  left_ = 1;
  next_ = 0;
  next_double_normal_sample_.reset();
}

uint32_t Generator::random() {
  constexpr int kM = 397;
  constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpper = 0x80000000u, kLower = 0x7fffffffu;
  if (--left_ == 0) {  // twist all 624 words at once, as PyTorch's engine does
    // The loop over i < kN with indices (i + 1) % kN and (i + kM) % kN, split where they wrap (the same
    // words, read in the same order, without a division per word).
    const auto twist = [&](int i, int next, int m) {
      const uint32_t y = (state_[i] & kUpper) | (state_[next] & kLower);
      state_[i] = state_[m] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    };
    int i = 0;
    for (; i < kN - kM; ++i) twist(i, i + 1, i + kM);
    for (; i < kN - 1; ++i) twist(i, i + 1, i + kM - kN);
    twist(kN - 1, 0, kM - 1);
    left_ = kN;
    next_ = 0;
  }
  uint32_t y = state_[next_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

uint64_t Generator::random64() {
  const uint64_t hi = random();
  const uint64_t lo = random();
  return (hi << 32) | lo;
}

int64_t Generator::random_int64() { return static_cast<int64_t>(random64() % (static_cast<uint64_t>(1) << 63)); }

double Generator::random_double() {
  return static_cast<double>(random64() & ((1ULL << 53) - 1)) * std::ldexp(1.0, -53);
}

double Generator::normal_double(double mean, double std) {
  if (next_double_normal_sample_) {
    const double cached = *next_double_normal_sample_;
    next_double_normal_sample_.reset();
    return cached * std + mean;
  }
  // Box-Muller in double: u = 53 random bits * 2^-53 (uniform_real_distribution<double>).
  const double u1 = static_cast<double>(random64() & ((1ULL << 53) - 1)) * std::ldexp(1.0, -53);
  const double u2 = static_cast<double>(random64() & ((1ULL << 53) - 1)) * std::ldexp(1.0, -53);
  const double r = std::sqrt(-2.0 * std::log1p(-u2));
  const double theta = 2.0 * M_PI * u1;
  next_double_normal_sample_ = r * std::sin(theta);
  return r * std::cos(theta) * std + mean;
}

namespace {

float uniform_float(Generator& g) {  // uniform_real_distribution<float>(0, 1)
  return static_cast<float>(g.random() & ((1u << 24) - 1)) * std::ldexp(1.0f, -24);
}

// normal_fill_16_AVX2: Box-Muller over the pairs (j, j + 8) of 16 uniforms, in place.
void normal_fill_16(float* data, float mean, float std) {
  const float two_pi = static_cast<float>(2.0 * M_PI);
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - data[j];
    const float u2 = data[j + 8];
    const float radius = std::sqrt(-2.0f * cephes::log_ps(u1));
    const float theta = two_pi * u2;
    float s, c;
    cephes::sincos_ps(theta, &s, &c);
    data[j] = std::fma(radius * c, std, mean);
    data[j + 8] = std::fma(radius * s, std, mean);
  }
}

}  // namespace

void Generator::normal_(float* data, int64_t n, double mean, double std) {
  if (n < 16) {  // serial kernel: one double normal per element, cached second sample kept
    for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(normal_double(mean, std));
    return;
  }
  const float fmean = static_cast<float>(mean), fstd = static_cast<float>(std);
  for (int64_t i = 0; i < n; ++i) data[i] = uniform_float(*this);
  for (int64_t i = 0; i + 16 <= n; i += 16) normal_fill_16(data + i, fmean, fstd);
  if (n % 16 != 0) {
    // Tail rule: 16 fresh uniforms overwrite the last 16 slots (already-transformed ones included).
    float* tail = data + n - 16;
    for (int i = 0; i < 16; ++i) tail[i] = uniform_float(*this);
    normal_fill_16(tail, fmean, fstd);
  }
}

std::vector<float> Generator::randn(int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  normal_(out.data(), n);
  return out;
}

void Generator::uniform_(float* data, int64_t n, double from, double to) {
  const float f = static_cast<float>(from), t = static_cast<float>(to);
  const float range = t - f;
  // PyTorch computes x * (to - from) + from in float; its AVX2 build contracts that to one fma.
  for (int64_t i = 0; i < n; ++i) data[i] = std::fma(uniform_float(*this), range, f);
}

std::vector<float> Generator::rand(int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  uniform_(out.data(), n);
  return out;
}

std::vector<int64_t> Generator::randperm(int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  std::iota(r.begin(), r.end(), int64_t{0});
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(random() % static_cast<uint64_t>(n - i));
    std::swap(r[i], r[i + z]);
  }
  return r;
}

std::vector<int64_t> Generator::randint(int64_t high, int64_t n) {
  if (high < 1) throw std::invalid_argument("randint: high must be at least 1, got " + std::to_string(high));
  const auto range = static_cast<uint64_t>(high);
  const bool wide = range >= (uint64_t{1} << 32);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (auto& v : out) v = static_cast<int64_t>((wide ? random64() : uint64_t{random()}) % range);
  return out;
}

Generator& default_generator() {
  static Generator g;
  return g;
}

}  // namespace ddplab
