// The Module tree's autograd (src/model/autograd.h, residual.h, Linear's weight tying): a parameter used by
// two modules is accumulated once, with the sum of both gradients, and is ready once, after the last; a
// forward no backward consumed changes nothing; a residual's input gradient is grad + the branch's;
// parameters() lists a tied weight once and state_dict_keys() under both owners.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "src/tensor/kernels.h"
#include "src/model/embedding.h"
#include "src/model/module.h"
#include "src/model/residual.h"
#include "src/model/linear.h"
#include "src/nn/embedding.h"
#include "src/data/torch_rng.h"

namespace ddplab {
namespace {

// ids -> Embedding -> Linear whose weight IS the embedding's (nanoGPT's wte / lm_head).
class TiedLm : public Module {
 public:
  explicit TiedLm(Generator& gen) : wte(5, 3, "wte", gen), head(3, 5, "head", gen, true, /*bias=*/false) {
    head.tie_weight(wte.weight);
  }
  Tensor forward(const Tensor&) override { throw std::logic_error("ids"); }
  Tensor forward_ids(const std::vector<int64_t>& ids, const std::vector<int64_t>& shape) override {
    GraphScope graph(*this);
    return head.forward(wte.forward_ids(ids, shape));
  }
  Tensor backward(const Tensor& g, bool, std::vector<Parameter*>& ready) override {
    return wte.backward(head.backward(g, true, ready), false, ready);
  }
  std::vector<Module*> children() override { return {&wte, &head}; }
  std::string repr() const override { return "TiedLm"; }

  Embedding wte;
  Linear head;
};

Tensor filled(std::vector<int64_t> shape, float start) {
  Tensor t = Tensor::empty(std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = start + 0.37f * static_cast<float>(i % 7) - 0.5f;
  return t;
}

TEST(ModuleTree, TiedWeightIsListedOnceAndKeyedTwice) {
  Generator gen(3);
  TiedLm m(gen);
  ASSERT_EQ(m.parameters().size(), 1u);
  EXPECT_EQ(m.parameters()[0], &m.wte.weight);
  EXPECT_EQ(m.state_dict_keys(), (std::vector<std::string>{"wte.weight", "head.weight"}));
}

TEST(ModuleTree, TiedWeightAccumulatesOnceAfterItsLastUse) {
  Generator gen(3);
  TiedLm m(gen);
  const std::vector<int64_t> ids{0, 3, 3, 1};
  const Tensor g = filled({2, 2, 5}, 0.25f);

  // What autograd computes: the head's weight gradient g^T h, the embedding's from g W, summed in that order.
  Matrix h(4, 3);
  nn::embedding_forward(ids.data(), 4, m.wte.weight.data(), 3, h.data());
  const LinearKernels& k = cpu_kernels(Kernels::fast);
  Matrix head_grad(5, 3), d(4, 3), emb_grad(5, 3);
  k.grad_weight(g.data(), h.data(), head_grad.data(), 4, 3, 5);
  k.grad_input(g.data(), m.wte.weight.data(), d.data(), 4, 3, 5);
  nn::embedding_backward(d.data(), ids.data(), 4, 5, 3, emb_grad.data());
  const Matrix want = head_grad + emb_grad;

  m.eval();
  m.forward_ids(ids, {2, 2});  // forwards nobody backpropagates (evaluation) leave nothing behind
  m.head.forward(m.wte.forward_ids(ids, {2, 2}));
  m.train();
  m.forward_ids(ids, {2, 2});
  std::vector<Parameter*> ready;
  m.backward(g, false, ready);
  ASSERT_EQ(ready, std::vector<Parameter*>{&m.wte.weight});
  ASSERT_TRUE(m.wte.weight.has_grad);
  EXPECT_TRUE(m.wte.weight.grad == want);

  // A second backward (gradient accumulation) adds the next sum into .grad.
  m.forward_ids(ids, {2, 2});
  ready.clear();
  m.backward(g, false, ready);
  EXPECT_EQ(ready, std::vector<Parameter*>{&m.wte.weight});
  EXPECT_TRUE(m.wte.weight.grad == Matrix(want + want));
}

TEST(ModuleTree, ResidualAddsTheBranchGradientAndKeepsTheBranchOrder) {
  Generator gen(5);
  auto lin = std::make_unique<Linear>(3, 3, "branch", gen);
  Linear* l = lin.get();
  Residual r(std::move(lin));
  const Tensor x = filled({4, 3}, 1.0f);
  const Tensor y = r.forward(x);
  Matrix lx(4, 3);
  cpu_kernels(Kernels::fast).forward(x.data(), l->weight.data(), l->bias.data(), lx.data(), 4, 3, 3);
  EXPECT_TRUE(y.value == Matrix(x.value + lx));

  const Tensor g = filled({4, 3}, -0.5f);
  std::vector<Parameter*> ready;
  const Tensor gx = r.backward(g, true, ready);
  EXPECT_EQ(ready, (std::vector<Parameter*>{&l->bias, &l->weight}));
  Matrix wg(4, 3);
  cpu_kernels(Kernels::fast).grad_input(g.data(), l->weight.data(), wg.data(), 4, 3, 3);
  EXPECT_TRUE(gx.value == Matrix(g.value + wg));
  EXPECT_EQ(r.parameters(), (std::vector<Parameter*>{&l->weight, &l->bias}));
  EXPECT_EQ(r.state_dict_keys(), (std::vector<std::string>{"branch.weight", "branch.bias"}));
}

}  // namespace
}  // namespace ddplab
