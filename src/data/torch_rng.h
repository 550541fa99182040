// PyTorch-compatible CPU random number generator (torch.manual_seed, randn, rand, randperm, random_).
//
// Bit-exact with PyTorch's CPU kernels on x86-64 (checked against Debian's torch 1.13):
//  - the Mersenne Twister stream (aten/src/ATen/core/MT19937RNGEngine.h) is platform independent;
//  - randn with >= 16 float32 elements reproduces the AVX2 normal_fill kernel, which PyTorch also runs on
//    AVX-512 machines. A PyTorch built without AVX2 (plain normal_fill, libm log/cos/sin) gives different
//    last bits for those sizes. See cephes_f32.h.
//  - randn with < 16 elements, rand/uniform_, randperm and int64 random_ only depend on the stream and
//    correctly rounded double arithmetic (glibc's log1p/sin/cos).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace ddplab {

// c10::detail::default_rng_seed_val: the seed of a new torch.Generator() object. NOT what a process starts
// from: torch 1.13 seeds a process's default CPU generator from /dev/urandom, a different seed every run
// (notebooks_ported/lab/fresh_seeds.py checks both).
inline constexpr uint64_t kDefaultSeed = 67280421310721ULL;

class Generator {
 public:
  explicit Generator(uint64_t seed = kDefaultSeed) { manual_seed(seed); }

  // Rebuilds the engine from the low 32 bits of seed and clears the cached normal sample.
  void manual_seed(uint64_t seed);

  uint32_t random();    // one 32-bit MT19937 output
  uint64_t random64();  // two outputs, the first one is the high word

  // torch.empty((), dtype=torch.int64).random_(): random64() % 2^63.
  int64_t random_int64();

  // at::uniform_real_distribution<double>(0, 1): the low 53 bits of random64() times 2^-53. One per element
  // of torch.rand(n, dtype=torch.float64) and of bernoulli_(p) on CPU (the draw Dropout's mask takes).
  double random_double();

  // torch.randn(n) / tensor.normal_(mean, std) on a contiguous float32 tensor.
  void normal_(float* data, int64_t n, double mean = 0.0, double std = 1.0);
  std::vector<float> randn(int64_t n);

  // torch.rand(n) / tensor.uniform_(from, to) on float32: fmaf(u, to - from, from), u = 24 bits * 2^-24.
  void uniform_(float* data, int64_t n, double from = 0.0, double to = 1.0);
  std::vector<float> rand(int64_t n);

  // torch.randperm(n, generator=g): Fisher-Yates variant with random() % (n - i).
  std::vector<int64_t> randperm(int64_t n);

  // torch.randint(high, (n,), generator=g), int64: ATen's random_from_to with range = high, one draw per
  // element: random() (32 bits) while range < 2^32, random64() from 2^32 on (torch 1.13; later versions
  // switch at 2^28), then draw % range. Needs high >= 1 (torch refuses from=0 >= to).
  std::vector<int64_t> randint(int64_t high, int64_t n);

 private:
  double normal_double(double mean, double std);  // at::normal_distribution<double>

  static constexpr int kN = 624;
  uint32_t state_[kN];
  int left_ = 1;
  int next_ = 0;
  std::optional<double> next_double_normal_sample_;
};

// The process-wide generator that torch.manual_seed / torch.randn use.
Generator& default_generator();
inline void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace ddplab
