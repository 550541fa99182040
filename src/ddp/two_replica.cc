#include "src/ddp/two_replica.h"

#include <fmt/format.h>

#include "src/data/data.h"
#include "src/base/flags.h"
#include "src/base/io.h"
#include "src/base/limits.h"
#include "src/train/loss.h"
#include "src/train/optim.h"
#include "src/base/parallel.h"

namespace ddplab {
namespace {

// class MLP in the notebook: manual_seed(seed), then hidden_layer and output_layer.
MLP make_mlp(const TwoReplicaConfig& cfg) {
  manual_seed(cfg.seed);
  return MLP({cfg.in_features, cfg.hidden, cfg.out_features}, /*relu=*/false, {"hidden_layer", "output_layer"});
}

float train_step(MLP& model, SGD& opt, const Matrix& x, const Matrix& y) {
  const Matrix out = model.forward(x);
  LossResult l = mse_loss(out, y);
  opt.zero_grad(/*set_to_none=*/true);
  model.backward(l.grad);
  opt.step();
  return l.loss;
}

}  // namespace

void validate(const TwoReplicaConfig& cfg) {
  if (cfg.replicas * cfg.batch_size > cfg.samples) {
    throw UsageError(
        fmt::format("--replicas * --batch-size must be <= --samples (each replica takes one whole batch): "
                    "{} * {} > {}",
                    cfg.replicas, cfg.batch_size, cfg.samples));
  }
  Footprint f;
  f.parameters = cfg.in_features * cfg.hidden + cfg.hidden + cfg.hidden * cfg.out_features + cfg.out_features;
  f.replicas = cfg.replicas + 2;  // the replicas, the one-device model, the initial copy
  f.copies = 2;                   // parameters and gradients
  f.data = cfg.samples * (cfg.in_features + cfg.out_features);
  f.activations = 2 * cfg.batch_size * (cfg.in_features + cfg.hidden + cfg.out_features);
  check_footprint(f, "--in-features, --hidden, --out-features, --replicas, --samples");
}

std::vector<std::string> notebook_param_names() { return {"W1", "b1", "W2", "b2"}; }

TwoReplicaResult run_two_replica(const TwoReplicaConfig& cfg) {
  validate(cfg);
  TwoReplicaResult r;
  const Dataset dataset = random_tensor_dataset(cfg.samples, cfg.in_features, cfg.out_features, cfg.seed);
  DataLoader loader(dataset.size(), cfg.batch_size, /*shuffle=*/false);
  const SGDOptions sgd{cfg.lr};

  // 2. One epoch on a single device.
  MLP model = make_mlp(cfg);
  r.initial.push_back(model);
  SGD opt(model.parameters(), sgd);
  for (const auto& batch : loader.iter()) {
    r.train_loss += train_step(model, opt, dataset.gather_x(batch), dataset.gather_y(batch));
  }

  // 3.1 Replica k takes the k-th batch of a fresh pass over the loader.
  const auto batches = loader.iter();
  std::vector<Matrix> xs, ys;
  for (int64_t k = 0; k < cfg.replicas; ++k) {
    xs.push_back(dataset.gather_x(batches[static_cast<size_t>(k)]));
    ys.push_back(dataset.gather_y(batches[static_cast<size_t>(k)]));
    r.x_shapes.push_back({xs.back().rows(), xs.back().cols()});
    r.y_shapes.push_back({ys.back().rows(), ys.back().cols()});
  }

  // 3.2-3.3 A model copy per device; local forward and backward (the replicas side by side: each
  // writes only its own model, so threads change no bit).
  ThreadPool pool(cfg.threads > 0 ? cfg.threads : available_cores());
  for (int64_t k = 0; k < cfg.replicas; ++k) r.replicas.push_back(make_mlp(cfg));
  const double params = static_cast<double>(cfg.in_features * cfg.hidden + cfg.hidden * cfg.out_features);
  parallel_for(&pool, r.replicas.size(), 6.0 * params * static_cast<double>(cfg.batch_size), [&](size_t k) {
    MLP& m = r.replicas[k];
    m.zero_grad(true);
    m.backward(mse_loss(m.forward(xs[k]), ys[k]).grad);
  });

  // 3.4 All-reduce by hand: W.grad = (W_0.grad + W_1.grad + ...) / R, additions left to right.
  const size_t num_params = r.replicas[0].parameters().size();
  parallel_for(&pool, num_params, params * static_cast<double>(cfg.replicas), [&](size_t p) {
    Matrix sum = r.replicas[0].parameters()[p]->grad;
    for (int64_t k = 1; k < cfg.replicas; ++k) sum += r.replicas[static_cast<size_t>(k)].parameters()[p]->grad;
    sum /= static_cast<float>(cfg.replicas);
    for (MLP& m : r.replicas) m.parameters()[p]->grad = sum;
  });

  // 3.5 Each replica steps its own optimizer.
  parallel_for(&pool, r.replicas.size(), 2.0 * params, [&](size_t k) { SGD(r.replicas[k].parameters(), sgd).step(); });

  // One device, one step on all R batches at once: the same mathematics as the averaged replicas.
  r.one_device.push_back(make_mlp(cfg));
  MLP& one = r.one_device.back();
  SGD one_opt(one.parameters(), sgd);
  Matrix x_all(cfg.replicas * cfg.batch_size, cfg.in_features);
  Matrix y_all(cfg.replicas * cfg.batch_size, cfg.out_features);
  for (int64_t k = 0; k < cfg.replicas; ++k) {
    x_all.middleRows(k * cfg.batch_size, cfg.batch_size) = xs[static_cast<size_t>(k)];
    y_all.middleRows(k * cfg.batch_size, cfg.batch_size) = ys[static_cast<size_t>(k)];
  }
  train_step(one, one_opt, x_all, y_all);
  return r;
}

namespace {

std::string json_model(const MLP& m) { return json_params(m.parameters(), notebook_param_names()); }

}  // namespace

std::string dump_json(const TwoReplicaResult& r) {
  std::string out = "{\n  \"train_loss\": " + json_float(r.train_loss) + ",\n";
  out += "  \"initial\": " + json_model(r.initial[0]) + ",\n";
  out += "  \"replicas\": [\n";
  for (size_t k = 0; k < r.replicas.size(); ++k) {
    out += "    " + json_model(r.replicas[k]) + (k + 1 < r.replicas.size() ? ",\n" : "\n");
  }
  out += "  ],\n  \"one_device\": " + json_model(r.one_device[0]) + "\n}\n";
  return out;
}

}  // namespace ddplab
