#include "src/nn/attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "src/nn/bmm.h"
#include "src/nn/dropout.h"
#include "src/nn/softmax.h"

namespace ddplab::nn {
namespace {

// The strided views the forward's code makes of qkv, and their reshapes for bmm (views or copies, as torch
// decides), rebuilt from the cached qkv in the backward so that both see the same strides.
struct Operands {
  std::vector<float> q_copy, kt_copy, v_copy;
  StridedBatch q, kt, v;  // [B*nh, T, hs], [B*nh, hs, T], [B*nh, T, hs]
};

void make_operands(const AttentionCache& c, Operands& o) {
  const int64_t hs = c.C / c.n_head, c3 = 3 * c.C, bh = c.B * c.n_head;
  const float* base = c.qkv.data();
  // split(C, dim=2) + view(B, T, nh, hs) + transpose(1, 2): [B, nh, T, hs] with strides [T*3C, hs, 3C, 1];
  // k.transpose(-2, -1) swaps the last two.
  const std::vector<int64_t> sizes{c.B, c.n_head, c.T, hs}, strides{c.T * c3, hs, c3, 1};
  const std::vector<int64_t> kt_sizes{c.B, c.n_head, hs, c.T}, kt_strides{c.T * c3, hs, 1, c3};
  const int64_t shape[3] = {bh, c.T, hs}, kt_shape[3] = {bh, hs, c.T};
  o.q = reshape_3d(base, sizes, strides, shape, o.q_copy);
  o.kt = reshape_3d(base + c.C, kt_sizes, kt_strides, kt_shape, o.kt_copy);
  o.v = reshape_3d(base + 2 * c.C, sizes, strides, shape, o.v_copy);
}

// A contiguous [B, nh, T, T] tensor reshaped to [B*nh, T, T] (always a view).
StridedBatch square_view(const float* data, const AttentionCache& c, std::vector<float>& unused) {
  const std::vector<int64_t> sizes{c.B, c.n_head, c.T, c.T}, strides{c.n_head * c.T * c.T, c.T * c.T, c.T, 1};
  const int64_t shape[3] = {c.B * c.n_head, c.T, c.T};
  return reshape_3d(data, sizes, strides, shape, unused);
}

}  // namespace

void causal_attention_forward(const float* qkv, int64_t B, int64_t T, int64_t C, int64_t n_head, double dropout_p,
                              bool training, Generator& gen, float* y, AttentionCache& cache) {
  if (B < 1 || T < 1 || C < 1 || n_head < 1 || C % n_head != 0) {
    throw std::invalid_argument(
        "causal attention: need B, T, C, n_head >= 1 and C divisible by n_head, got B=" + std::to_string(B) +
        " T=" + std::to_string(T) + " C=" + std::to_string(C) + " n_head=" + std::to_string(n_head));
  }
  const int64_t hs = C / n_head, bh = B * n_head, n_att = bh * T * T;
  cache.B = B;
  cache.T = T;
  cache.C = C;
  cache.n_head = n_head;
  // (1.0 / math.sqrt(hs)) is a Python float; mul converts the wrapped scalar to the tensor's float.
  cache.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs)));
  cache.qkv.assign(qkv, qkv + B * T * 3 * C);
  Operands o;
  make_operands(cache, o);

  // att = (q @ k^T) * scale, masked_fill(-inf above the diagonal), softmax over the last dim.
  // resize, not assign: bmm writes every element, and from the second step on the cache's memory is reused.
  std::vector<float>& att = cache.att;
  att.resize(static_cast<size_t>(n_att));
  bmm(o.q, o.kt, att.data());
  for (int64_t r = 0; r < bh * T; ++r) {
    const int64_t i = r % T;
    float* row = att.data() + r * T;
    for (int64_t j = 0; j < T; ++j) row[j] = j > i ? -std::numeric_limits<float>::infinity() : row[j] * cache.scale;
  }
  softmax_lastdim_forward(att.data(), att.data(), bh * T, T);

  // attn_dropout(att). The mask's memory only when dropout draws one (p > 0 in training); with n = 0
  // dropout_mask still checks p and draws nothing.
  const int64_t n_noise = training && dropout_p > 0 ? n_att : 0;
  cache.noise.resize(static_cast<size_t>(n_noise));
  if (dropout_mask(cache.noise.data(), n_noise, dropout_p, training, gen)) {
    cache.att_dropped.resize(static_cast<size_t>(n_att));
    dropout_forward(att.data(), cache.noise.data(), cache.att_dropped.data(), n_att);
  } else {
    cache.noise.clear();
    cache.att_dropped.clear();
  }
  const float* p = cache.att_dropped.empty() ? att.data() : cache.att_dropped.data();

  // y = att @ v, then transpose(1, 2).contiguous(): [B, nh, T, hs] -> [B, T, nh*hs].
  std::vector<float> out(static_cast<size_t>(bh * T * hs)), unused;
  bmm(square_view(p, cache, unused), o.v, out.data());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < n_head; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const float* src = out.data() + ((b * n_head + h) * T + t) * hs;
        float* dst = y + (b * T + t) * C + h * hs;
        for (int64_t d = 0; d < hs; ++d) dst[d] = src[d];
      }
    }
  }
}

void causal_attention_backward(const float* dy, const AttentionCache& c, float* dqkv) {
  if (c.qkv.empty()) throw std::invalid_argument("causal attention backward: the cache holds no forward");
  const int64_t B = c.B, T = c.T, C = c.C, nh = c.n_head, hs = C / nh, bh = B * nh, n_att = bh * T * T;
  Operands o;
  make_operands(c, o);
  const bool dropped = !c.att_dropped.empty();
  std::vector<float> unused;
  const StridedBatch p = square_view(dropped ? c.att_dropped.data() : c.att.data(), c, unused);

  // The gradient reaching att @ v: dy.view(B, T, nh, hs).transpose(1, 2), reshaped to [B*nh, T, hs].
  std::vector<float> gy_copy;
  const std::vector<int64_t> gy_sizes{B, nh, T, hs}, gy_strides{T * C, hs, C, 1};
  const int64_t gy_shape[3] = {bh, T, hs};
  const StridedBatch gy = reshape_3d(dy, gy_sizes, gy_strides, gy_shape, gy_copy);

  // BmmBackward0 of att @ v.
  std::vector<float> grad_att(static_cast<size_t>(n_att)), grad_v(static_cast<size_t>(bh * T * hs));
  bmm(gy, transpose12(o.v), grad_att.data());
  bmm(transpose12(p), gy, grad_v.data());

  // Dropout (MulBackward0: grad * noise), softmax backward, masked_fill backward (0 where masked), * scale.
  if (dropped) dropout_backward(grad_att.data(), c.noise.data(), grad_att.data(), n_att);
  softmax_lastdim_backward(grad_att.data(), c.att.data(), grad_att.data(), bh * T, T);
  for (int64_t r = 0; r < bh * T; ++r) {
    const int64_t i = r % T;
    float* row = grad_att.data() + r * T;
    for (int64_t j = 0; j < T; ++j) row[j] = j > i ? 0.0f : row[j] * c.scale;
  }

  // BmmBackward0 of q @ k^T.
  std::vector<float> grad_q(static_cast<size_t>(bh * T * hs)), grad_kt(static_cast<size_t>(bh * hs * T));
  const StridedBatch gs = square_view(grad_att.data(), c, unused);
  bmm(gs, transpose12(o.kt), grad_q.data());
  bmm(transpose12(o.q), gs, grad_kt.data());

  // Back through transpose/view/split: dqkv[b, t, :] = [dq | dk | dv] with head h at h*hs.
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t item = b * nh + h;
      for (int64_t t = 0; t < T; ++t) {
        float* dst = dqkv + (b * T + t) * 3 * C + h * hs;
        for (int64_t d = 0; d < hs; ++d) {
          dst[d] = grad_q[(item * T + t) * hs + d];
          dst[C + d] = grad_kt[(item * hs + d) * T + t];
          dst[2 * C + d] = grad_v[(item * T + t) * hs + d];
        }
      }
    }
  }
}

}  // namespace ddplab::nn
