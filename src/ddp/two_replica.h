// Notebook 000 as a function: one single-device epoch, then R replicas that each train on one batch with
// gradients averaged by hand (summed in rank order, then divided by R), then one optimizer step each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/model/linear.h"

namespace ddplab {

struct TwoReplicaConfig {
  int64_t replicas = 2;
  uint64_t seed = 12345;
  int64_t samples = 64;
  int64_t batch_size = 32;
  int64_t in_features = 6;
  int64_t hidden = 4;
  int64_t out_features = 2;
  double lr = 0.01;
  int threads = 0;  // replicas side by side (--threads; 0: every core); no result depends on it
};

struct TwoReplicaResult {
  float train_loss = 0.0f;                     // single-device epoch: sum of the batch losses
  std::vector<std::vector<int64_t>> x_shapes;  // per replica, [batch, in]
  std::vector<std::vector<int64_t>> y_shapes;
  std::vector<MLP> initial;     // one MLP as constructed (all replicas start from it)
  std::vector<MLP> replicas;    // after the averaged step
  std::vector<MLP> one_device;  // one model, one step on the R batches concatenated
};

// Throws UsageError when the configuration cannot run (e.g. replicas * batch_size > samples).
void validate(const TwoReplicaConfig& cfg);
TwoReplicaResult run_two_replica(const TwoReplicaConfig& cfg);

// The notebook's short names for the four tensors: W1, b1, W2, b2.
std::vector<std::string> notebook_param_names();

// JSON dump: {"train_loss": ..., "initial": {...}, "replicas": [{W1, b1, W2, b2}, ...], "one_device": {...}}.
std::string dump_json(const TwoReplicaResult& r);

}  // namespace ddplab
