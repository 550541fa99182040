#include "src/nn/activations.h"

#include <cmath>

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "src/tensor/aten_vec.h"

namespace ddplab::nn {
namespace {

using vec::V;

inline V set1(float v) { return _mm256_set1_ps(v); }
inline V add(V a, V b) { return _mm256_add_ps(a, b); }
inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }

// cpu_kernel_vec's vectorized_loop on contiguous data: two vectors (16 floats) at a time, then the scalar
// function on the n % 16 left over.
template <class VF, class SF>
void unary_loop(const float* x, float* y, int64_t n, VF vf, SF sf) {
  int64_t i = 0;
  for (; i <= n - 2 * vec::kSize; i += 2 * vec::kSize) {
    vec::store(y + i, vf(vec::loadu(x + i)));
    vec::store(y + i + vec::kSize, vf(vec::loadu(x + i + vec::kSize)));
  }
  for (; i < n; ++i) y[i] = sf(x[i]);
}

template <class VF, class SF>
void binary_loop(const float* a, const float* b, float* y, int64_t n, VF vf, SF sf) {
  int64_t i = 0;
  for (; i <= n - 2 * vec::kSize; i += 2 * vec::kSize) {
    vec::store(y + i, vf(vec::loadu(a + i), vec::loadu(b + i)));
    vec::store(y + i + vec::kSize, vf(vec::loadu(a + i + vec::kSize), vec::loadu(b + i + vec::kSize)));
  }
  for (; i < n; ++i) y[i] = sf(a[i], b[i]);
}

// Vectorized<float>::erf in torch 1.13 (vec256_float.h): Sleef_erff8_u10. (Later versions replaced it with a
// polynomial.)
V erf_vec(V x) { return Sleef_erff8_u10(x); }

// Activation.cpp's constants: computed in double, rounded to float once.
const float kAlpha = static_cast<float>(M_SQRT1_2);
const float kErfBeta = static_cast<float>(M_2_SQRTPI * M_SQRT1_2 * 0.5);
const float kTanhBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
const float kKappa = static_cast<float>(0.044715);
const float kThreeKappa = 3.0f * kKappa;

// torch 1.13's gelu_out_cpu / gelu_backward_out_cpu for approximate='none' when use_mkldnn(x) (mkldnn enabled,
// contiguous float, numel > 1): ideep::eltwise_forward / eltwise_backward with algorithm::eltwise_gelu_erf on a
// plain f32 memory (forward_training, alpha 0), i.e. oneDNN 2.6.3's JIT kernel, the same library torch links.
// Elementwise: the layout and thread count do not change a value (checked: jit:avx2 and jit:avx512_core agree).
const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::eltwise_forward::primitive_desc gelu_erf_forward_pd(const dnnl::memory::desc& md) {
  return dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_gelu_erf, md, 0.f, 0.f),
      cpu_engine());
}

// One OpenMP thread, as under torch.set_num_threads(1): with libgomp's default, oneDNN would split the op over
// every core and leave a worker spinning after it (a third of the GPT bench's CPU time); the values are the same.
void gelu_erf_onednn(const float* x, float* y, int64_t n) {
  omp_set_num_threads(1);
  const dnnl::memory::desc md({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  dnnl::stream stream(cpu_engine());
  dnnl::eltwise_forward(gelu_erf_forward_pd(md))
      .execute(stream, {{DNNL_ARG_SRC, dnnl::memory(md, cpu_engine(), const_cast<float*>(x))},
                        {DNNL_ARG_DST, dnnl::memory(md, cpu_engine(), y)}});
  stream.wait();
}

void gelu_erf_backward_onednn(const float* grad_y, const float* x, float* grad_x, int64_t n) {
  omp_set_num_threads(1);
  const dnnl::memory::desc md({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  const dnnl::eltwise_backward::primitive_desc pd(
      dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_gelu_erf, md, md, 0.f, 0.f), cpu_engine(),
      gelu_erf_forward_pd(md));
  dnnl::stream stream(cpu_engine());
  dnnl::eltwise_backward(pd).execute(stream,
                                     {{DNNL_ARG_SRC, dnnl::memory(md, cpu_engine(), const_cast<float*>(x))},
                                      {DNNL_ARG_DIFF_DST, dnnl::memory(md, cpu_engine(), const_cast<float*>(grad_y))},
                                      {DNNL_ARG_DIFF_SRC, dnnl::memory(md, cpu_engine(), grad_x)}});
  stream.wait();
}

}  // namespace

void tanh_forward(const float* x, float* y, int64_t n) {
  vec::map([](V v) { return vec::tanh(v); }, y, x, n);
}

void tanh_backward(const float* grad_y, const float* y, float* grad_x, int64_t n) {
  // g * (1 - y * y), the inner multiply-subtract fused.
  binary_loop(
      grad_y, y, grad_x, n, [](V g, V t) { return mul(g, _mm256_fnmadd_ps(t, t, set1(1.0f))); },
      [](float g, float t) { return g * std::fma(-t, t, 1.0f); });
}

void sigmoid_forward(const float* x, float* y, int64_t n) {
  unary_loop(
      x, y, n, [](V v) { return _mm256_div_ps(set1(1.0f), add(vec::exp(sub(set1(0.0f), v)), set1(1.0f))); },
      [](float v) { return 1.0f / (1.0f + std::exp(-v)); });
}

void sigmoid_backward(const float* grad_y, const float* y, float* grad_x, int64_t n) {
  binary_loop(
      grad_y, y, grad_x, n, [](V g, V s) { return mul(mul(g, sub(set1(1.0f), s)), s); },
      [](float g, float s) { return g * (1.0f - s) * s; });
}

void gelu_forward(const float* x, float* y, int64_t n, GeluApproximate approximate, bool mkldnn) {
  if (approximate == GeluApproximate::kNone && mkldnn && n > 1) return gelu_erf_onednn(x, y, n);
  if (approximate == GeluApproximate::kNone) {
    // x * 0.5 * (1 + erf(x / sqrt(2)))
    unary_loop(
        x, y, n, [](V v) { return mul(mul(v, set1(0.5f)), add(set1(1.0f), erf_vec(mul(v, set1(kAlpha))))); },
        [](float v) { return v * 0.5f * (1.0f + std::erf(v * kAlpha)); });
  } else {
    // 0.5 * x * (1 + tanh(beta * (x + kappa * x^3))), the inner multiply-add fused.
    unary_loop(
        x, y, n,
        [](V v) {
          const V inner = mul(set1(kTanhBeta), _mm256_fmadd_ps(set1(kKappa), mul(mul(v, v), v), v));
          return mul(mul(set1(0.5f), v), add(set1(1.0f), vec::tanh(inner)));
        },
        [](float v) {
          const float inner = kTanhBeta * std::fma(kKappa, v * v * v, v);
          return 0.5f * v * (1.0f + std::tanh(inner));
        });
  }
}

void gelu_backward(const float* grad_y, const float* x, float* grad_x, int64_t n, GeluApproximate approximate,
                   bool mkldnn) {
  if (approximate == GeluApproximate::kNone && mkldnn && n > 1) return gelu_erf_backward_onednn(grad_y, x, grad_x, n);
  if (approximate == GeluApproximate::kNone) {
    // dy * (cdf + x * pdf), cdf = 0.5 * (1 + erf(x / sqrt(2))), pdf = beta * exp(-x^2 / 2); the last
    // multiply-add fused.
    binary_loop(
        grad_y, x, grad_x, n,
        [](V dy, V v) {
          const V cdf = mul(set1(0.5f), add(set1(1.0f), erf_vec(mul(v, set1(kAlpha)))));
          const V pdf = mul(set1(kErfBeta), vec::exp(mul(mul(v, v), set1(-0.5f))));
          return mul(dy, _mm256_fmadd_ps(v, pdf, cdf));
        },
        [](float dy, float v) {
          const float pdf = kErfBeta * std::exp(v * v * -0.5f);
          return dy * std::fma(0.5f, 1.0f + std::erf(v * kAlpha), v * pdf);
        });
  } else {
    // dy * (0.5 * (1 + th) + 0.5 * x * (1 - th^2) * beta * (1 + 3 kappa x^2)), th = tanh(inner).
    binary_loop(
        grad_y, x, grad_x, n,
        [](V dy, V v) {
          const V x_sq = mul(v, v);
          const V inner = mul(set1(kTanhBeta), _mm256_fmadd_ps(set1(kKappa), mul(x_sq, v), v));
          const V th = vec::tanh(inner);
          const V left = mul(set1(0.5f), v);
          const V right = add(set1(1.0f), th);
          const V tanh_d = _mm256_fnmadd_ps(th, th, set1(1.0f));
          const V inner_d = mul(set1(kTanhBeta), _mm256_fmadd_ps(set1(kThreeKappa), x_sq, set1(1.0f)));
          const V right_d = mul(mul(left, tanh_d), inner_d);
          return mul(dy, _mm256_fmadd_ps(set1(0.5f), right, right_d));
        },
        [](float dy, float v) {
          const float x_sq = v * v;
          const float inner = kTanhBeta * std::fma(kKappa, x_sq * v, v);
          const float th = std::tanh(inner);
          const float left = 0.5f * v;
          const float right = 1.0f + th;
          const float tanh_d = std::fma(-th, th, 1.0f);
          const float inner_d = kTanhBeta * std::fma(kThreeKappa, x_sq, 1.0f);
          const float right_d = left * tanh_d * inner_d;
          return dy * std::fma(0.5f, right, right_d);
        });
  }
}

}  // namespace ddplab::nn
