#include "src/train/clip_grad.h"

#include <algorithm>
#include <cmath>

namespace ddplab {

float norm2(const float* x, int64_t n) {
  // ReduceOpsKernel.cpp's norm_kernel_tensor_iterator_impl, p = 2 over the last dimension: the vectorised
  // loop of norm_two_reduce_step, then the lanes stored and summed, then the scalar tail.
  constexpr int kLanes = 8;  // Vectorized<float>::size() with AVX2
  float acc[kLanes] = {};
  int64_t d = 0;
  for (; d < n - n % kLanes; d += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] = std::fma(x[d + l], x[d + l], acc[l]);
  }
  float sum = acc[0];
  for (int l = 1; l < kLanes; ++l) sum = sum + acc[l];
  // The tail loop is `sum += x * x` in the source; as Debian's torch was compiled, its first whole groups of
  // 4 square in one vector multiply and add in order (unfused), and the last n % 4 are fused multiply-adds
  // (measured: with either rule alone tails of 4-7 or 1-3 miss by an ulp now and then).
  for (; n - d >= 4; d += 4) {
    float sq[4];
    for (int l = 0; l < 4; ++l) sq[l] = x[d + l] * x[d + l];
    for (int l = 0; l < 4; ++l) sum = sum + sq[l];
  }
  for (; d < n; ++d) sum = std::fma(x[d], x[d], sum);
  return std::sqrt(sum);
}

float clip_grad_norm_(const std::vector<Parameter*>& params, double max_norm) {
  std::vector<float> norms;  // torch.stack([torch.norm(g, 2) for g in grads])
  for (const Parameter* p : params) {
    if (p->has_grad) norms.push_back(norm2(p->grad.data(), p->grad.size()));
  }
  if (norms.empty()) return 0.0f;
  const float total = norm2(norms.data(), static_cast<int64_t>(norms.size()));
  float coef = (1.0f / (total + static_cast<float>(1e-6))) * static_cast<float>(max_norm);
  if (!std::isnan(coef)) coef = std::min(coef, 1.0f);  // torch.clamp(coef, max=1.0)
  for (Parameter* p : params) {
    if (!p->has_grad) continue;
    float* g = p->grad.data();
    for (Eigen::Index k = 0; k < p->grad.size(); ++k) g[k] *= coef;
  }
  return total;
}

}  // namespace ddplab
