// bazel run //notebooks_ported/005_cnn_digits -- a CNN with BatchNorm and Dropout on the 8x8 digits under DDP
// (simulated ranks): what DDP does to BatchNorm's buffers, what it does not do to Dropout's masks, and the
// accuracy against one device. Every number is torch's bit for bit (tests/model_ddp_test); the claims are
// checked in PyTorch by reference.py beside this file.
#include <cstdio>

#include <fmt/format.h>

#include "src/compare.h"
#include "src/report/report.h"
#include "src/ddp/trainer.h"
#include "src/flags.h"
#include "src/model/norm.h"

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: 005_cnn_digits [flags]
A CNN (--model cnn: conv, BatchNorm2d, ReLU, max-pool twice, Dropout(0.25), two Linears) on the digits,
simulated with DDP's semantics. Defaults in brackets.
  --world-size N   ranks, 2..8 [2]       --epochs E   [1]       --lr LR   SGD, momentum 0.9 [0.05]
  --batch-size B   per rank [32]         --seed S     manual_seed of every rank [12345]
)";

ddp::Config base_config(const Flags& flags) {
  ddp::Config c;
  c.dataset = ddp::DatasetKind::digits;
  c.model = "cnn";
  c.loss = ddp::LossKind::ce;
  c.world_size = flags.get_int("world-size", 2, 2, 8);
  c.epochs = flags.get_int("epochs", 1, 1, 100);
  c.lr = flags.get_double("lr", 0.05, 0.0, 10.0);
  c.momentum = 0.9;
  c.batch_size = flags.get_int("batch-size", 32, 2, 187);
  c.seed = static_cast<uint64_t>(flags.get_int("seed", 12345, 0, INT64_MAX));
  c.threads = 1;
  ddp::validate(c);
  return c;
}

// Rows of rank k vs rank 0, split into parameters and buffers: "exact" when every row is.
struct Split {
  bool params_exact = true, buffers_exact = true;
  std::string worst_buffer;
};
Split compare_ranks(const ddp::SimResult& res, size_t k) {
  Split s;
  const auto rows = cmp_models(res.replicas[k]->model, res.replicas[0]->model);
  const size_t np = res.replicas[0]->model.parameters().size();
  double worst = -1;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i < np) {
      s.params_exact = s.params_exact && rows[i].exact;
    } else if (!rows[i].exact) {
      s.buffers_exact = false;
      if (rows[i].maxdiff > worst) {
        worst = rows[i].maxdiff;
        s.worst_buffer = fmt::format("{} maxdiff {}", rows[i].name, python_float_repr(rows[i].maxdiff));
      }
    }
  }
  return s;
}

const Dropout& dropout_of(const ddp::Replica& rep) {
  for (size_t i = 0; i < rep.model.size(); ++i) {
    if (const auto* d = dynamic_cast<const Dropout*>(&rep.model[i])) return *d;
  }
  throw std::logic_error("the cnn has no Dropout");
}

std::string accuracy(int64_t correct, int64_t total) {
  return fmt::format("{}/{} ({:.2f}%)", correct, total, 100.0 * static_cast<double>(correct) / static_cast<double>(total));
}

int run(int argc, char** argv) {
  const Flags flags(argc, argv, {"world-size", "epochs", "lr", "batch-size", "seed"});
  if (flags.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  const ddp::Config cfg = base_config(flags);
  std::printf("Lab 005: the digits CNN under DDP, %lld simulated ranks\n%s\n", static_cast<long long>(cfg.world_size),
              ddp::describe(cfg).c_str());

  const ddp::SimResult bb = ddp::simulate(cfg, /*single_device=*/true);
  ddp::Config no_bb_cfg = cfg;
  no_bb_cfg.broadcast_buffers = false;
  const ddp::SimResult no_bb = ddp::simulate(no_bb_cfg, false);
  ddp::Config per_rank_cfg = cfg;
  per_rank_cfg.seed_per_rank = true;
  const ddp::SimResult per_rank = ddp::simulate(per_rank_cfg, false);
  const size_t last = static_cast<size_t>(cfg.world_size - 1);

  std::printf("\n# 1. BatchNorm's buffers (running_mean, running_var, num_batches_tracked), rank %zu vs rank 0\n", last);
  const Split a = compare_ranks(bb, last), b = compare_ranks(no_bb, last);
  std::printf("broadcast_buffers=True (DDP's default): parameters exact: %s | buffers exact: %s\n",
              a.params_exact ? "True" : "False", a.buffers_exact ? "True" : "False");
  std::printf("  DDP gives every rank rank 0's buffers before each training forward, and again before the\n"
              "  model.eval() forward: every rank evaluates with the same running statistics.\n");
  std::printf("broadcast_buffers=False: parameters exact: %s | buffers exact: %s%s\n", b.params_exact ? "True" : "False",
              b.buffers_exact ? "True" : "False", b.buffers_exact ? "" : (" (" + b.worst_buffer + ")").c_str());
  std::printf("  the all-reduce keeps the parameters equal, but each rank's running statistics average only the\n"
              "  batches it saw. Test accuracy per rank:");
  for (size_t r = 0; r < no_bb.test_correct.size(); ++r) {
    std::printf(" rank %zu %s%s", r, accuracy(no_bb.test_correct[r], no_bb.test_size).c_str(),
                r + 1 < no_bb.test_correct.size() ? "," : "\n");
  }

  std::printf("\n# 2. Dropout's masks in the last training step (1 = kept and scaled by 1/(1-p), 0 = dropped)\n");
  const auto show = [](const std::vector<float>& m) {
    std::string s;
    for (size_t i = 0; i < 24 && i < m.size(); ++i) s += m[i] != 0.0f ? '1' : '0';
    return s;
  };
  for (const auto* run : {&bb, &per_rank}) {
    const bool alike = run == &bb;
    const auto& m0 = dropout_of(*run->replicas[0]).last_mask();
    const auto& mk = dropout_of(*run->replicas[last]).last_mask();
    size_t differ = 0;
    for (size_t i = 0; i < m0.size() && i < mk.size(); ++i) differ += m0[i] != mk[i];
    std::printf("%s: rank 0 %s... | rank %zu %s... | %zu of %zu mask elements differ\n",
                alike ? "every rank manual_seed(seed)" : "--seed-per-rank (manual_seed(seed + rank))", show(m0).c_str(),
                last, show(mk).c_str(), differ, m0.size());
    std::printf("  parameters exact across ranks: %s\n", compare_ranks(*run, last).params_exact ? "True" : "False");
  }
  std::printf("  DDP does not touch the masks: ranks seeded alike drop the same units of their (different) batches,\n"
              "  ranks seeded per rank drop different ones. The parameters agree either way: DDP averages gradients,\n"
              "  whatever produced them.\n");

  std::printf("\n# 3. Accuracy on the %lld held-out digits (model.eval())\n", static_cast<long long>(bb.test_size));
  std::printf("DDP rank 0: %s | one device on the union of the shards: %s\n",
              accuracy(bb.test_correct[0], bb.test_size).c_str(),
              accuracy(bb.single_device_test_correct, bb.test_size).c_str());
  std::printf("  the one device normalises each step with the statistics of all %lld samples, DDP's BatchNorm with\n"
              "  each rank's %lld (SyncBatchNorm would share them; torch runs it on GPUs only), and its Dropout\n"
              "  draws other masks: close, not equal.\n",
              static_cast<long long>(cfg.batch_size * cfg.world_size), static_cast<long long>(cfg.batch_size));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("005_cnn_digits", argc, argv, run); }
