// nn.Embedding without padding_idx, max_norm or scale_grad_by_freq (nanoGPT's wte and wpe), bit for bit with
// torch 1.13 on CPU (aten/src/ATen/native/Embedding.cpp).
//   forward: weight.index_select(0, idx): row idx[i] of weight copied to out row i.
//   backward (embedding_dense_backward_cpu): grad_weight = zeros, then for i in flattened index order
//     grad_weight[idx[i]] += dout[i] (one add per element; its `* scale` is by 1.0). Repeated tokens thus add
//     their rows in order of appearance. Above 1000 indices torch splits the vocabulary among threads, each
//     walking all indices in order, so the sums do not depend on the thread count (checked: 1, 2, 4 threads).
#pragma once

#include <cstdint>

namespace ddplab::nn {

// out: [n, dim] = weight[idx[i]] for each of the n indices; each index must lie in [0, num_embeddings) (the
// caller's check: the weight's row count is not passed here).
void embedding_forward(const int64_t* idx, int64_t n, const float* weight, int64_t dim, float* out);

// dweight (num_embeddings x dim) is zeroed, then the rows of dout added as torch's backward adds them.
// Throws std::out_of_range naming an index outside [0, num_embeddings).
void embedding_backward(const float* dout, const int64_t* idx, int64_t n, int64_t num_embeddings, int64_t dim,
                        float* dweight);

}  // namespace ddplab::nn
