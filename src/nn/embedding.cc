#include "src/nn/embedding.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ddplab::nn {

void embedding_forward(const int64_t* idx, int64_t n, const float* weight, int64_t dim, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * dim, weight + idx[i] * dim, static_cast<size_t>(dim) * sizeof(float));
  }
}

void embedding_backward(const float* dout, const int64_t* idx, int64_t n, int64_t num_embeddings, int64_t dim,
                        float* dweight) {
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= num_embeddings) {
      throw std::out_of_range("embedding_backward: index " + std::to_string(idx[i]) + " at position " +
                              std::to_string(i) + " is outside [0, " + std::to_string(num_embeddings) + ")");
    }
  }
  std::fill(dweight, dweight + num_embeddings * dim, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    float* row = dweight + idx[i] * dim;
    const float* g = dout + i * dim;
    for (int64_t j = 0; j < dim; ++j) row[j] += g[j];
  }
}

}  // namespace ddplab::nn
