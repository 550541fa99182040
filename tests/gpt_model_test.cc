// The tiny GPT (src/gpt/model.h) against torch 1.13 running the same model in one process, no DDP
// (tests/golden/gpt/gpt_single*.json from sim/gpt_reference.py --single): the initial parameters after
// construction and _init_weights, what the generator draws next, the first batch, the logits, the loss and
// every gradient, bit for bit.
#include "src/gpt/model.h"

#include <gtest/gtest.h>

#include "src/gpt/train.h"
#include "src/data/text_data.h"
#include "tests/testing.h"

namespace ddplab::gpt {
namespace {

using testing::json;

GptConfig config_of(const json& c, int64_t vocab) {
  GptConfig m;
  m.vocab_size = vocab;
  m.n_layer = c["n_layer"];
  m.n_head = c["n_head"];
  m.n_embd = c["n_embd"];
  m.block_size = c["block_size"];
  m.dropout = c["dropout"];
  m.bias = c["bias"];
  m.gelu = c["gelu"] == "tanh" ? nn::GeluApproximate::kTanh : nn::GeluApproximate::kNone;
  m.aux_head_every = c["aux_head_every"];
  return m;
}

std::vector<float> values(const Parameter& p, bool grad) {
  const Matrix& m = grad ? p.grad : p.value;
  return {m.data(), m.data() + m.size()};
}

void check_single(const std::string& file) {
  const json g = testing::load_json(file);
  const json& c = g["config"];
  const TextData data = TextData::load(c["data"]);
  ASSERT_EQ(data.vocab_size(), g["vocab_size"].get<int64_t>());
  const GptConfig cfg = config_of(c, data.vocab_size());
  Generator gen(c["seed"].get<uint64_t>());
  Gpt model(cfg, gen);

  std::vector<std::string> names;
  for (Parameter* p : model.parameters()) names.push_back(p->name);
  EXPECT_EQ(names, g["parameter_names"].get<std::vector<std::string>>());
  EXPECT_EQ(model.state_dict_keys(), g["state_dict_keys"].get<std::vector<std::string>>());
  for (Parameter* p : model.parameters()) {
    const auto m =
        testing::match(file + " init " + p->name, values(*p, false), testing::floats(g["state_dict"][p->name]));
    EXPECT_EQ(m.equal, m.total) << p->name;
  }
  // The count the footprint check (--model gpt's memory limit) uses: torch's numel over parameters().
  int64_t torch_count = 0;
  for (const auto& n : g["parameter_names"])
    torch_count += static_cast<int64_t>(testing::floats(g["state_dict"][n.get<std::string>()]).size());
  EXPECT_EQ(gpt_parameter_count(cfg, data.vocab_size()), torch_count);
  Generator peek = gen;
  const int64_t B = c["batch_size"], T = cfg.block_size;
  EXPECT_EQ(peek.randint(g["next_randint"]["high"], B), testing::ints(g["next_randint"]["values"]))
      << "construction and initialisation drew a different amount";
  const Batch b = data.get_batch(Split::kTrain, gen, B, T);
  EXPECT_EQ(b.x, testing::ints(g["batch"]["x"]));
  EXPECT_EQ(b.y, testing::ints(g["batch"]["y"]));

  const float loss = model.forward(b.x, b.y, B, T, g["aux_used"].get<bool>(), gen);
  const Matrix& logits = model.logits();
  const auto ml =
      testing::match(file + " logits", {logits.data(), logits.data() + logits.size()}, testing::floats(g["logits"]));
  EXPECT_EQ(ml.equal, ml.total);
  EXPECT_EQ(loss, g["loss"].get<float>());
  std::vector<Parameter*> ready;
  model.backward(1.0f, ready);
  for (Parameter* p : model.parameters()) {
    ASSERT_TRUE(g["grads"].contains(p->name)) << p->name;
    const std::vector<float> want = testing::floats(g["grads"][p->name]);
    const auto m = testing::match(file + " grad " + p->name, values(*p, true), want);
    EXPECT_EQ(m.equal, m.total) << p->name << " max ulps " << testing::max_ulps(values(*p, true), want);
  }
  EXPECT_EQ(ready.size(), model.parameters().size());
  EXPECT_EQ(gen.randint(g["next_randint"]["high"], B), testing::ints(g["next_randint_after_backward"]))
      << "the forward's dropout masks drew a different amount";
}

TEST(GptModel, SingleProcessStepEqualsTorch) { check_single("tests/golden/gpt/gpt_single.json"); }

TEST(GptModel, DropoutTanhNoBiasStepEqualsTorch) {
  check_single("tests/golden/gpt/gpt_single_dropout_tanh_nobias.json");
}

}  // namespace
}  // namespace ddplab::gpt
