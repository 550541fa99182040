#include "src/gpt/sample.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include "src/nn/softmax.h"

namespace ddplab::gpt {

void multinomial_one(const float* probs, int64_t rows, int64_t cols, Generator& gen, int64_t* out) {
  const int64_t n = rows * cols;
  for (int64_t i = 0; i < n; ++i) {
    if (!(probs[i] >= 0.0f) || std::isinf(probs[i])) {
      throw std::invalid_argument("multinomial: probability tensor contains either `inf`, `nan` or element < 0");
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    float s = 0.0f;
    for (int64_t c = 0; c < cols; ++c) s += probs[r * cols + c];
    if (s == 0.0f)
      throw std::invalid_argument("multinomial: invalid multinomial distribution (sum of probabilities <= 0)");
  }
  // exponential_(1) on float32: exponential_distribution<double>, -1.0 / lambda * log1p(-u), cast to float.
  std::vector<float> q(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    q[static_cast<size_t>(i)] = static_cast<float>(-1.0 / 1.0 * std::log1p(-gen.random_double()));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = 0;
    float best_v = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = probs[r * cols + c] / q[static_cast<size_t>(r * cols + c)];
      if (c == 0 || v > best_v) {  // argmax keeps the first maximum
        best = c;
        best_v = v;
      }
    }
    out[r] = best;
  }
}

std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& idx, int64_t B, const SampleOptions& opt,
                              Generator& gen) {
  const GptConfig& cfg = model.config();
  if (B <= 0 || idx.empty() || idx.size() % static_cast<size_t>(B) != 0) {
    throw std::invalid_argument("generate: idx must hold B rows of at least one token");
  }
  if (!(opt.temperature > 0.0) || opt.max_new_tokens < 0 || opt.top_k < 0) {
    throw std::invalid_argument("generate: temperature must be > 0, max_new_tokens and top_k >= 0");
  }
  const int64_t V = cfg.vocab_size;
  int64_t T = static_cast<int64_t>(idx.size()) / B;
  std::vector<std::vector<int64_t>> seq(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) seq[static_cast<size_t>(b)].assign(idx.begin() + b * T, idx.begin() + (b + 1) * T);
  const bool was_training = model.training();
  model.train(false);
  const float temperature = static_cast<float>(opt.temperature);
  std::vector<float> logits(static_cast<size_t>(B * V)), probs(static_cast<size_t>(B * V));
  std::vector<int64_t> next(static_cast<size_t>(B));
  for (int64_t step = 0; step < opt.max_new_tokens; ++step) {
    // idx_cond = idx[:, -block_size:]
    const int64_t Tc = std::min(T, cfg.block_size);
    std::vector<int64_t> cond;
    for (const auto& s : seq) cond.insert(cond.end(), s.end() - Tc, s.end());
    // The full forward's last row: lm_head computes each output row on its own, so it equals nanoGPT's
    // lm_head(x[:, [-1], :]) (checked bit for bit by gpt_sample_test). The targets only feed the unused loss.
    model.forward(cond, cond, B, Tc, false, gen);
    const float* full = model.logits().data();
    for (int64_t b = 0; b < B; ++b) {
      const float* row = full + ((b + 1) * Tc - 1) * V;
      float* l = logits.data() + b * V;
      for (int64_t v = 0; v < V; ++v) l[v] = row[v] / temperature;
      if (opt.top_k > 0) {
        // v, _ = torch.topk(logits, min(top_k, V)); logits[logits < v[:, [-1]]] = -inf
        std::vector<float> sorted(l, l + V);
        const int64_t k = std::min(opt.top_k, V);
        std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
        const float kth = sorted[static_cast<size_t>(k - 1)];
        for (int64_t v = 0; v < V; ++v) {
          if (l[v] < kth) l[v] = -std::numeric_limits<float>::infinity();
        }
      }
    }
    nn::softmax_lastdim_forward(logits.data(), probs.data(), B, V);
    multinomial_one(probs.data(), B, V, gen, next.data());
    for (int64_t b = 0; b < B; ++b) seq[static_cast<size_t>(b)].push_back(next[static_cast<size_t>(b)]);
    ++T;
  }
  model.train(was_training);
  std::vector<int64_t> out;
  for (const auto& s : seq) out.insert(out.end(), s.begin(), s.end());
  return out;
}

}  // namespace ddplab::gpt
