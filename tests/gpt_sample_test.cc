// Sampling text from the tiny GPT (src/gpt/sample.h) against torch 1.13 (tests/golden/gpt_sample/, written by
// make_gpt_sample_goldens.py there): torch.multinomial(probs, 1) on its own, its indices and how far it moves
// the generator, then nanoGPT's generate on two trained models (temperature, top-k, the context cropped to
// block_size), every token and the generator's next draws.
#include "src/gpt/sample.h"

#include <cstdio>

#include <gtest/gtest.h>

#include "src/data/text_data.h"
#include "tests/testing.h"

namespace ddplab::gpt {
namespace {

using testing::json;

const json& golden() {
  static const json g = testing::load_json("tests/golden/gpt_sample/gpt_sample.json");
  return g;
}

TEST(GptSample, MultinomialOneSampleIsTorchs) {
  int64_t matched = 0, total = 0;
  for (const json& c : golden()["multinomial"]) {
    const int64_t rows = c["rows"], cols = c["cols"];
    const std::vector<float> probs = testing::floats(c["probs"]);
    Generator gen(c["seed"].get<uint64_t>());
    std::vector<int64_t> out(static_cast<size_t>(rows));
    multinomial_one(probs.data(), rows, cols, gen, out.data());
    const std::vector<int64_t> want = testing::ints(c["samples"]);
    for (size_t i = 0; i < want.size(); ++i) matched += out[i] == want[i];
    total += static_cast<int64_t>(want.size());
    EXPECT_EQ(out, want) << rows << "x" << cols;
    EXPECT_EQ(gen.randint(1 << 30, 4), testing::ints(c["next_randint"]))
        << "multinomial drew a different amount (torch: one double per element)";
  }
  std::printf("multinomial: %lld/%lld samples equal torch's, over %zu cases\n", static_cast<long long>(matched),
              static_cast<long long>(total), golden()["multinomial"].size());
}

TEST(GptSample, MultinomialRefusesWhatTorchRefuses) {
  Generator gen(1);
  int64_t out = 0;
  const std::vector<float> negative = {0.5f, -0.1f}, zero = {0.0f, 0.0f};
  EXPECT_THROW(multinomial_one(negative.data(), 1, 2, gen, &out), std::invalid_argument);
  EXPECT_THROW(multinomial_one(zero.data(), 1, 2, gen, &out), std::invalid_argument);
}

TEST(GptSample, GenerateIsNanoGptsUnderTorch) {
  const TextData data = TextData::load(golden()["data"]);
  int64_t matched = 0, total = 0;
  for (const json& m : golden()["generate"]) {
    const json& c = m["config"];
    GptConfig cfg;
    cfg.vocab_size = c["vocab_size"];
    ASSERT_EQ(cfg.vocab_size, data.vocab_size());
    cfg.n_embd = c["n_embd"];
    cfg.block_size = c["block_size"];
    cfg.n_layer = c["n_layer"];
    cfg.n_head = c["n_head"];
    cfg.bias = c["bias"];
    cfg.gelu = c["gelu"] == "tanh" ? nn::GeluApproximate::kTanh : nn::GeluApproximate::kNone;
    Generator unused(0);
    Gpt model(cfg, unused, /*draw=*/false);
    for (Parameter* p : model.parameters()) {
      const std::vector<float> v = testing::floats(m["parameters"][p->name]);
      ASSERT_EQ(static_cast<int64_t>(v.size()), p->value.size()) << p->name;
      std::copy(v.begin(), v.end(), p->value.data());
    }
    for (const json& s : m["samples"]) {
      Generator gen(s["seed"].get<uint64_t>());
      const int64_t B = s["batch"];
      const std::vector<int64_t> prompt = testing::ints(s["prompt"]);
      // The prompt is torch.randint(V, (B, T0)) right after the seed: drawn here as well, so the generator
      // stands where torch's stood.
      EXPECT_EQ(gen.randint(cfg.vocab_size, static_cast<int64_t>(prompt.size())), prompt);
      SampleOptions o;
      o.max_new_tokens = s["max_new_tokens"];
      o.temperature = s["temperature"];
      o.top_k = s["top_k"];
      const std::vector<int64_t> got = generate(model, prompt, B, o, gen);
      const std::vector<int64_t> want = testing::ints(s["tokens"]);
      ASSERT_EQ(got.size(), want.size());
      int64_t eq = 0;
      for (size_t i = 0; i < want.size(); ++i) eq += got[i] == want[i];
      matched += eq;
      total += static_cast<int64_t>(want.size());
      EXPECT_EQ(got, want) << m["name"] << " seed " << s["seed"];
      EXPECT_EQ(gen.randint(1 << 30, 4), testing::ints(s["next_randint"])) << m["name"] << " seed " << s["seed"];
      std::printf("%s B %lld new %lld temperature %g top_k %lld: %lld/%zu tokens equal\n",
                  m["name"].get<std::string>().c_str(), static_cast<long long>(B),
                  static_cast<long long>(o.max_new_tokens), o.temperature, static_cast<long long>(o.top_k),
                  static_cast<long long>(eq), want.size());
    }
  }
  std::printf("generate: %lld/%lld tokens equal torch's\n", static_cast<long long>(matched),
              static_cast<long long>(total));
}

}  // namespace
}  // namespace ddplab::gpt
