// bazel run //sim:two_replica -- seed notebook 000 ("Simulating DDP by hand") number for number.
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "src/base/compare.h"
#include "src/ddp/two_replica.h"
#include "src/base/flags.h"
#include "src/base/io.h"
#include "src/base/parallel.h"

namespace {

constexpr const char* kUsage = R"(usage: two_replica [flags]
Reproduces seed notebook 000: one single-device epoch, then R replicas that each train on one batch,
gradients averaged by hand, one SGD step each, and the notebook's cmp table.
  --replicas R        replicas, replica k takes batch k of the unshuffled loader (default 2)
  --seed S            torch.manual_seed for the data and for every model (default 12345)
  --samples N         dataset size (default 64)
  --batch-size B      (default 32)
  --in-features I     (default 6)
  --hidden H          (default 4)
  --out-features O    (default 2)
  --lr LR             SGD learning rate (default 0.01)
  --dump-params FILE  write initial/final parameters and train_loss as JSON
  --threads N         replicas side by side, 1..256 (0: every core); the same bits for any N (default 0)
)";

using ddplab::CmpResult;
using ddplab::MLP;

std::vector<CmpResult> cmp_models(const MLP& a, const MLP& b) {
  std::vector<CmpResult> rows;
  const auto names = ddplab::notebook_param_names();
  const auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    rows.push_back(ddplab::cmp(names[i], pa[i]->data(), pb[i]->data(), pa[i]->numel()));
  }
  return rows;
}

int run(int argc, char** argv) {
  const ddplab::Flags flags(argc, argv,
                            {"replicas", "seed", "samples", "batch-size", "in-features", "hidden", "out-features", "lr",
                             "dump-params", "threads"});
  if (flags.help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty()) {
    throw ddplab::UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  }
  constexpr int64_t kMaxSize = 1 << 20;
  ddplab::TwoReplicaConfig cfg;
  cfg.replicas = flags.get_int("replicas", cfg.replicas, 1, 1024);
  cfg.seed = static_cast<uint64_t>(flags.get_int("seed", 12345, 0, INT64_MAX));
  cfg.samples = flags.get_int("samples", cfg.samples, 1, kMaxSize);
  cfg.batch_size = flags.get_int("batch-size", cfg.batch_size, 1, kMaxSize);
  cfg.in_features = flags.get_int("in-features", cfg.in_features, 1, 65536);
  cfg.hidden = flags.get_int("hidden", cfg.hidden, 1, 65536);
  cfg.out_features = flags.get_int("out-features", cfg.out_features, 1, 65536);
  cfg.lr = flags.get_double("lr", cfg.lr, 0.0, 1e6);
  cfg.threads = ddplab::threads_from_flags(flags);
  const std::string dump = flags.get_string("dump-params", "");
  if (!dump.empty()) {
    if (std::string why = ddplab::check_writable(dump); !why.empty()) {
      throw ddplab::UsageError("--dump-params: " + why);
    }
  }
  ddplab::validate(cfg);

  const ddplab::TwoReplicaResult r = ddplab::run_two_replica(cfg);

  fmt::print("Using cpu For One Iteration of Forward and Backward Passes (ddplab, PyTorch's arithmetic)\n");
  fmt::print("epoch 1 | train_loss={:.4f}\n", r.train_loss);
  for (size_t k = 0; k < r.replicas.size(); ++k) {
    fmt::print("x_{0}.shape: {1}, y_{0}.shape: {2}{3}", k, ddplab::torch_size(r.x_shapes[k]),
               ddplab::torch_size(r.y_shapes[k]), k + 1 < r.replicas.size() ? "\n" : "\n\n");
  }
  for (size_t k = 1; k < r.replicas.size(); ++k) {
    fmt::print("# replica {} vs replica 0 after the averaged step (the notebook's table)\n", k);
    for (const CmpResult& row : cmp_models(r.replicas[k], r.replicas[0])) {
      fmt::print("{}\n", ddplab::format_cmp(row));
    }
  }
  fmt::print("\n# replica 0 vs one device trained in one step on the {} batches concatenated\n", cfg.replicas);
  int64_t differ = 0, total = 0;
  for (const CmpResult& row : cmp_models(r.replicas[0], r.one_device[0])) {
    fmt::print("{}\n", ddplab::format_cmp(row));
    differ += row.num_different;
    total += row.numel;
  }
  if (differ == 0) {
    fmt::print("bitwise equal: yes, all {} parameters\n", total);
  } else {
    fmt::print(
        "bitwise equal: no, {} of {} parameters differ in their last bits. Same mathematics, different\n"
        "order of float additions: one matmul over {} rows vs {} matmuls over {} rows, then a sum of {}\n"
        "gradients and a division by {}. Each rounding is tiny; 'approximate' is what to expect.\n",
        differ, total, cfg.replicas * cfg.batch_size, cfg.replicas, cfg.batch_size, cfg.replicas, cfg.replicas);
  }
  if (!dump.empty()) {
    if (std::string why = ddplab::write_file_atomic(dump, ddplab::dump_json(r)); !why.empty()) {
      std::fprintf(stderr, "two_replica: --dump-params: %s\n", why.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("two_replica", argc, argv, run); }
