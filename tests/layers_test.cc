// src/nn/ batchnorm, dropout, activations and src/train/loss.cc's cross-entropy against torch 1.13 on CPU, one
// thread: the committed goldens (tests/golden/layers/make_layer_goldens.py) and, where /usr/bin/python3 has
// torch, the same cases from fresh random values. Each tensor prints whether it is bit for bit torch's and
// its largest distance in ulps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/train/loss.h"
#include "src/nn/activations.h"
#include "src/nn/batchnorm.h"
#include "src/nn/dropout.h"
#include "src/data/torch_rng.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::json;

// Prints "label: exact yes N/N bitwise, max ulps K" and returns the max ulps (-1 when the sizes differ).
int64_t ulps(const std::string& label, const std::vector<float>& got, const std::vector<float>& want) {
  const testing::Bits b = testing::print_bits(label, got, want, 52);
  return b.sizes_match ? b.worst : -1;
}

#define EXPECT_BITWISE(label, got, want) EXPECT_EQ(ulps(label, got, want), 0) << (label)

void check_batchnorm(const json& doc, const std::string& src) {
  for (const json& c : doc["batchnorm"]) {
    const std::vector<int64_t> shape = testing::ints(c["shape"]);
    const int64_t N = shape[0], C = shape[1];
    int64_t L = 1;
    for (size_t d = 2; d < shape.size(); ++d) L *= shape[d];
    std::string label = src + " batchnorm [";
    for (size_t d = 0; d < shape.size(); ++d) label += (d ? "," : "") + std::to_string(shape[d]);
    label += "] ";
    const auto x = testing::floats(c["x"]), w = testing::floats(c["weight"]), b = testing::floats(c["bias"]);
    const auto dy = testing::floats(c["grad_y"]);
    auto rm = testing::floats(c["running_mean"]), rv = testing::floats(c["running_var"]);
    std::vector<float> y(x.size()), y_eval(x.size()), dx(x.size()), mean(C), invstd(C), dw(C), db(C);
    nn::batchnorm_forward_eval(x.data(), w.data(), b.data(), rm.data(), rv.data(), y_eval.data(), N, C, L);
    nn::batchnorm_forward_train(x.data(), w.data(), b.data(), rm.data(), rv.data(), y.data(), mean.data(),
                                invstd.data(), N, C, L);
    nn::batchnorm_backward_train(dy.data(), x.data(), w.data(), mean.data(), invstd.data(), dx.data(), dw.data(),
                                 db.data(), N, C, L);
    EXPECT_BITWISE(label + "y eval", y_eval, testing::floats(c["y_eval"]));
    EXPECT_BITWISE(label + "y train", y, testing::floats(c["y"]));
    EXPECT_BITWISE(label + "running_mean", rm, testing::floats(c["running_mean_after"]));
    EXPECT_BITWISE(label + "running_var", rv, testing::floats(c["running_var_after"]));
    EXPECT_BITWISE(label + "grad_x", dx, testing::floats(c["grad_x"]));
    EXPECT_BITWISE(label + "grad_weight", dw, testing::floats(c["grad_weight"]));
    EXPECT_BITWISE(label + "grad_bias", db, testing::floats(c["grad_bias"]));
    EXPECT_EQ(c["num_batches_tracked"].get<int>(), 1);
  }
}

// GELU(approximate='none') is checked twice: as torch runs it by default (oneDNN's eltwise_gelu_erf for more
// than one element) and with torch.backends.mkldnn disabled (ATen's kernel).
void check_activations(const json& doc, const std::string& src) {
  for (const json& c : doc["activations"]) {
    const auto x = testing::floats(c["x"]), gy = testing::floats(c["grad_y"]);
    const int64_t n = static_cast<int64_t>(x.size());
    const std::string at = src + " n=" + std::to_string(n) + " ";
    std::vector<float> y(x.size()), gx(x.size());

    nn::tanh_forward(x.data(), y.data(), n);
    nn::tanh_backward(gy.data(), y.data(), gx.data(), n);
    EXPECT_BITWISE(at + "tanh y", y, testing::floats(c["tanh"]["y"]));
    EXPECT_BITWISE(at + "tanh grad_x", gx, testing::floats(c["tanh"]["grad_x"]));

    nn::sigmoid_forward(x.data(), y.data(), n);
    nn::sigmoid_backward(gy.data(), y.data(), gx.data(), n);
    EXPECT_BITWISE(at + "sigmoid y", y, testing::floats(c["sigmoid"]["y"]));
    EXPECT_BITWISE(at + "sigmoid grad_x", gx, testing::floats(c["sigmoid"]["grad_x"]));

    nn::gelu_forward(x.data(), y.data(), n, nn::GeluApproximate::kTanh);
    nn::gelu_backward(gy.data(), x.data(), gx.data(), n, nn::GeluApproximate::kTanh);
    EXPECT_BITWISE(at + "gelu(tanh) y", y, testing::floats(c["gelu_tanh"]["y"]));
    EXPECT_BITWISE(at + "gelu(tanh) grad_x", gx, testing::floats(c["gelu_tanh"]["grad_x"]));

    nn::gelu_forward(x.data(), y.data(), n);
    nn::gelu_backward(gy.data(), x.data(), gx.data(), n);
    EXPECT_BITWISE(at + "gelu y", y, testing::floats(c["gelu"]["y"]));
    EXPECT_BITWISE(at + "gelu grad_x", gx, testing::floats(c["gelu"]["grad_x"]));

    nn::gelu_forward(x.data(), y.data(), n, nn::GeluApproximate::kNone, /*mkldnn=*/false);
    nn::gelu_backward(gy.data(), x.data(), gx.data(), n, nn::GeluApproximate::kNone, /*mkldnn=*/false);
    EXPECT_BITWISE(at + "gelu y (mkldnn disabled)", y, testing::floats(c["gelu_no_mkldnn"]["y"]));
    EXPECT_BITWISE(at + "gelu grad_x (mkldnn disabled)", gx, testing::floats(c["gelu_no_mkldnn"]["grad_x"]));
  }
}

void check_dropout(const json& doc, const std::string& src) {
  for (const json& c : doc["dropout"]) {
    const auto x = testing::floats(c["x"]), gy = testing::floats(c["grad_y"]);
    const int64_t n = static_cast<int64_t>(x.size());
    const double p = c["p"].get<double>();
    const std::string at = src + " dropout seed=" + std::to_string(c["seed"].get<int>()) + " p=" + std::to_string(p) +
                           " n=" + std::to_string(n) + " ";
    Generator gen(c["seed"].get<uint64_t>());
    std::vector<float> noise(x.size()), y(x.size()), gx(x.size());
    ASSERT_TRUE(nn::dropout_mask(noise.data(), n, p, /*train=*/true, gen));
    nn::dropout_forward(x.data(), noise.data(), y.data(), n);
    nn::dropout_backward(gy.data(), noise.data(), gx.data(), n);
    EXPECT_BITWISE(at + "y", y, testing::floats(c["y"]));
    EXPECT_BITWISE(at + "grad_x", gx, testing::floats(c["grad_x"]));
    // The mask took exactly one random64 per element: the next draw is torch's next draw.
    EXPECT_BITWISE(at + "rand(1) afterwards", gen.rand(1), testing::floats(c["rand_after"]));
    // Generator::random_double is torch.rand(n, dtype=float64).
    gen.manual_seed(c["seed"].get<uint64_t>());
    int64_t equal = 0;
    for (const json& u : c["rand_float64"]) equal += gen.random_double() == u.get<double>();
    std::printf("%-52s %lld/%zu float64 uniforms equal\n", (at + "rand(float64)").c_str(),
                static_cast<long long>(equal), c["rand_float64"].size());
    EXPECT_EQ(equal, static_cast<int64_t>(c["rand_float64"].size()));
  }
}

void check_cross_entropy(const json& doc, const std::string& src) {
  for (const json& c : doc["cross_entropy"]) {
    const int64_t rows = c["rows"].get<int64_t>(), cols = c["cols"].get<int64_t>();
    const std::string at = src + " cross_entropy " + std::to_string(rows) + "x" + std::to_string(cols) + " ";
    const auto x = testing::floats(c["x"]);
    const Matrix input = Eigen::Map<const Matrix>(x.data(), rows, cols);
    const LossResult r = cross_entropy(input, testing::ints(c["target"]));
    EXPECT_BITWISE(at + "loss", std::vector<float>{r.loss}, testing::floats(c["loss"]));
    EXPECT_BITWISE(at + "grad", std::vector<float>(r.grad.data(), r.grad.data() + r.grad.size()),
                   testing::floats(c["grad"]));
    const auto tp = testing::floats(c["target_probs"]);
    const LossResult rp = cross_entropy_probs(input, Eigen::Map<const Matrix>(tp.data(), rows, cols));
    EXPECT_BITWISE(at + "loss (probabilities)", std::vector<float>{rp.loss}, testing::floats(c["loss_probs"]));
    EXPECT_BITWISE(at + "grad (probabilities)", std::vector<float>(rp.grad.data(), rp.grad.data() + rp.grad.size()),
                   testing::floats(c["grad_probs"]));
  }
}

const json& goldens() {
  static const json doc = testing::load_json("tests/golden/layers/norm_act.json");
  return doc;
}

TEST(BatchNorm, MatchesTorchGoldens) { check_batchnorm(goldens(), "golden"); }
TEST(Activations, MatchTorchGoldens) { check_activations(goldens(), "golden"); }
TEST(Dropout, MatchesTorchGoldens) { check_dropout(goldens(), "golden"); }
TEST(CrossEntropy, MatchesTorchGoldens) { check_cross_entropy(goldens(), "golden"); }

TEST(Dropout, IdentityAndAllDroppedDrawNothing) {
  Generator gen(5), untouched(5);
  std::vector<float> noise(4, -1.0f);
  EXPECT_FALSE(nn::dropout_mask(noise.data(), 4, 0.5, /*train=*/false, gen));  // eval
  EXPECT_FALSE(nn::dropout_mask(noise.data(), 4, 0.0, /*train=*/true, gen));   // p == 0
  EXPECT_EQ(noise, std::vector<float>(4, -1.0f));
  EXPECT_TRUE(nn::dropout_mask(noise.data(), 4, 1.0, /*train=*/true, gen));  // p == 1: x * 0
  EXPECT_EQ(noise, std::vector<float>(4, 0.0f));
  EXPECT_EQ(gen.random(), untouched.random());
  EXPECT_THROW(nn::dropout_mask(noise.data(), 4, 1.5, true, gen), std::invalid_argument);
  EXPECT_THROW(nn::dropout_mask(noise.data(), 4, -0.1, true, gen), std::invalid_argument);
}

TEST(BatchNorm, TrainingNeedsTwoValuesPerChannel) {
  std::vector<float> x(3), w(3, 1), b(3), rm(3), rv(3, 1), y(3), m(3), s(3);
  EXPECT_THROW(nn::batchnorm_forward_train(x.data(), w.data(), b.data(), rm.data(), rv.data(), y.data(), m.data(),
                                           s.data(), 1, 3, 1),
               std::invalid_argument);
}

TEST(Layers, LiveAgainstTorch) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: live layer check skipped";
  const std::string out = testing::temp_dir() + "/live.json";
  const testing::CommandResult r = testing::run_command(
      {"/usr/bin/python3", "tests/golden/layers/make_layer_goldens.py", "--out", out, "--seed", "20261124"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json doc = testing::load_json(out);
  check_batchnorm(doc, "live");
  check_activations(doc, "live");
  check_dropout(doc, "live");
  check_cross_entropy(doc, "live");
}

}  // namespace
}  // namespace ddplab
