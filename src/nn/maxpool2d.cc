#include "src/nn/maxpool2d.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace ddplab::nn {

const char* maxpool2d_check(const MaxPool2dShape& s) {
  if (s.n < 1 || s.c < 1 || s.h < 1 || s.w < 1) return "maxpool2d: batch, channels, height and width must be >= 1";
  if (s.kernel < 1) return "maxpool2d: kernel size must be at least 1";
  if (s.stride < 0) return "maxpool2d: stride must be at least 1 (or 0 for the kernel size)";
  if (s.padding < 0 || s.padding > s.kernel / 2) return "maxpool2d: padding must be between 0 and half the kernel";
  if (s.h + 2 * s.padding < s.kernel || s.w + 2 * s.padding < s.kernel) return "maxpool2d: output size is too small";
  return "";
}

namespace {

void require_valid(const MaxPool2dShape& s) {
  const std::string why = maxpool2d_check(s);
  if (!why.empty()) throw std::invalid_argument(why);
}

}  // namespace

void maxpool2d_forward(const MaxPool2dShape& s, const float* x, float* y, int64_t* indices) {
  require_valid(s);
  const int64_t oh = s.out_h(), ow = s.out_w(), step = s.step();
  for (int64_t p = 0; p < s.n * s.c; ++p) {
    const float* in = x + p * s.h * s.w;
    float* out = y + p * oh * ow;
    int64_t* ind = indices + p * oh * ow;
    for (int64_t i = 0; i < oh; ++i) {
      const int64_t ih0 = std::max<int64_t>(i * step - s.padding, 0);
      const int64_t ih1 = std::min(i * step - s.padding + s.kernel, s.h);
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t iw0 = std::max<int64_t>(j * step - s.padding, 0);
        const int64_t iw1 = std::min(j * step - s.padding + s.kernel, s.w);
        int64_t max_index = ih0 * s.w + iw0;
        float max_value = -std::numeric_limits<float>::infinity();
        for (int64_t ih = ih0; ih < ih1; ++ih) {
          for (int64_t iw = iw0; iw < iw1; ++iw) {
            const float v = in[ih * s.w + iw];
            if (v > max_value || std::isnan(v)) {
              max_value = v;
              max_index = ih * s.w + iw;
            }
          }
        }
        out[i * ow + j] = max_value;
        ind[i * ow + j] = max_index;
      }
    }
  }
}

void maxpool2d_backward(const MaxPool2dShape& s, const int64_t* indices, const float* grad_y, float* grad_x) {
  require_valid(s);
  const int64_t plane_in = s.h * s.w, plane_out = s.out_h() * s.out_w();
  std::fill(grad_x, grad_x + s.n * s.c * plane_in, 0.0f);
  for (int64_t p = 0; p < s.n * s.c; ++p) {
    float* gx = grad_x + p * plane_in;
    for (int64_t o = 0; o < plane_out; ++o) {
      const int64_t k = indices[p * plane_out + o];
      if (k < 0 || k >= plane_in) throw std::out_of_range("maxpool2d_backward: an index is outside its plane");
      gx[k] = gx[k] + grad_y[p * plane_out + o];
    }
  }
}

}  // namespace ddplab::nn
