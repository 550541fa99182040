// nn.Embedding(num_embeddings, embedding_dim) as a Module (nanoGPT's wte and wpe): its input is token ids
// (forward_ids), its kernels src/nn/embedding.h's, so lookups and gradients are torch 1.13's bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/module.h"
#include "src/data/torch_rng.h"

namespace ddplab {

// weight [num_embeddings, embedding_dim], named "<prefix>.weight"; reset_parameters draws normal_(0, 1) at
// construction (nothing with reset_parameters false: zeros, for a copy to fill).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, const std::string& prefix, Generator& gen,
            bool reset_parameters = true);

  // ids of `shape` -> [shape..., embedding_dim]. Throws std::out_of_range for an id outside the table.
  Tensor forward_ids(const std::vector<int64_t>& ids, const std::vector<int64_t>& shape) override;
  // Throws std::logic_error: an embedding takes ids.
  Tensor forward(const Tensor& x) override;
  // embedding_dense_backward: the rows of grad_out added into a zeroed table in index order. The ids need
  // no gradient: returns an undefined Tensor.
  Tensor backward(const Tensor& grad_out, bool need_grad_input, std::vector<Parameter*>& ready) override;
  std::vector<Parameter*> parameters() override { return {&weight}; }
  using Module::parameters;
  std::string repr() const override;

  Parameter weight;

 private:
  int64_t num_, dim_;
  std::vector<int64_t> ids_;  // the last forward's
  std::vector<float> scratch_;  // the table's gradient when it cannot go straight into .grad
};

}  // namespace ddplab
