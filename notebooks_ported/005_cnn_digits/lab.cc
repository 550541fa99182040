// bazel run //notebooks_ported/005_cnn_digits -- a CNN with BatchNorm and Dropout on the 8x8 digits under DDP
// (simulated ranks, or real ones over Gloo/NCCL through lab::Group): what DDP does to BatchNorm's buffers, what
// it does not do to Dropout's masks, and the accuracy against one device. Every number is torch's bit for bit (tests/model_ddp_test); the claims are
// checked in PyTorch by reference.py beside this file.
#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "notebooks_ported/lab/group.h"
#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/lab_report.h"
#include "src/base/compare.h"
#include "src/ddp/trainer.h"
#include "src/base/flags.h"
#include "src/launch/run_flags.h"
#include "src/launch/runner.h"
#include "src/report/report.h"

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: 005_cnn_digits [flags]
A CNN (--model cnn: conv, BatchNorm2d, ReLU, max-pool twice, Dropout(0.25), two Linears) on the digits under
DDP: simulated ranks, or real ones (--backend gloo|nccl --nproc N). Defaults in brackets.
  ranks: --world-size N (sim) or --nproc N, 2..8 [2]
  --epochs E   [1]       --lr LR   SGD, momentum 0.9 [0.05]
  --batch-size B   per rank [32]         --seed S     manual_seed of every rank [12345]
  --report FILE.html   (sim) what it printed, the loss per rank, rank 1 vs rank 0, buffers and Dropout masks per rank
)";

ddp::Config base_config(const Flags& flags) {
  ddp::Config c;
  c.dataset = ddp::DatasetKind::digits;
  c.model = "cnn";
  c.loss = ddp::LossKind::ce;
  c.world_size = 2;
  c.epochs = flags.get_int("epochs", 1, 1, 100);
  c.lr = flags.get_double("lr", 0.05, 0.0, 10.0);
  c.momentum = 0.9;
  c.batch_size = flags.get_int("batch-size", 32, 2, 187);
  c.seed = static_cast<uint64_t>(flags.get_int("seed", 12345, 0, INT64_MAX));
  c.threads = 1;
  return c;
}

// Rows of rank k vs rank 0, split into parameters and buffers: "exact" when every row is.
struct Split {
  bool params_exact = true, buffers_exact = true;
  std::string worst_buffer;
};
Split compare_ranks(const lab::Trained& t, size_t k) {
  Split s;
  const auto rows = lab::cmp_states(t.ranks[k], t.ranks[0]);
  double worst = -1;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i < t.ranks[0].num_params) {
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

std::string accuracy(int64_t correct, int64_t total) {
  return fmt::format("{}/{} ({:.2f}%)", correct, total,
                     100.0 * static_cast<double>(correct) / static_cast<double>(total));
}

int body(const lab::Group& g, const ddp::Config& cfg, lab::LabReport& page) {
  g.say(fmt::format("Lab 005: the digits CNN under DDP, {}\n{}\n", g.describe(cfg.world_size), ddp::describe(cfg)));
  const auto bb = lab::train(g, cfg, /*single_device=*/true);
  ddp::Config no_bb_cfg = cfg;
  no_bb_cfg.broadcast_buffers = false;
  const auto no_bb = lab::train(g, no_bb_cfg);
  ddp::Config per_rank_cfg = cfg;
  per_rank_cfg.seed_per_rank = true;
  const auto per_rank = lab::train(g, per_rank_cfg);
  const size_t last = static_cast<size_t>(cfg.world_size - 1);

  g.say(fmt::format("\n# 1. BatchNorm's buffers (running_mean, running_var, num_batches_tracked), rank {} vs rank 0\n",
                    last));
  const Split a = compare_ranks(*bb, last), b = compare_ranks(*no_bb, last);
  const auto py = [](bool v) { return v ? "True" : "False"; };
  g.say(fmt::format("broadcast_buffers=True (DDP's default): parameters exact: {} | buffers exact: {}\n",
                    py(a.params_exact), py(a.buffers_exact)));
  g.say("  DDP gives every rank rank 0's buffers before each training forward, and again before the\n"
        "  model.eval() forward: every rank evaluates with the same running statistics.\n");
  g.say(fmt::format("broadcast_buffers=False: parameters exact: {} | buffers exact: {}{}\n", py(b.params_exact),
                    py(b.buffers_exact), b.buffers_exact ? "" : " (" + b.worst_buffer + ")"));
  std::string line =
      "  the all-reduce keeps the parameters equal, but each rank's running statistics average only the\n"
      "  batches it saw. Test accuracy per rank:";
  for (size_t r = 0; r < no_bb->ranks.size(); ++r) {
    line += fmt::format(" rank {} {}{}", r, accuracy(no_bb->ranks[r].test_correct, no_bb->test_size),
                        r + 1 < no_bb->ranks.size() ? "," : "\n");
  }
  g.say(line);

  g.say("\n# 2. Dropout's masks in the last training step (1 = kept and scaled by 1/(1-p), 0 = dropped)\n");
  const auto show = [](const std::vector<float>& m) {
    std::string s;
    for (size_t i = 0; i < 24 && i < m.size(); ++i) s += m[i] != 0.0f ? '1' : '0';
    return s;
  };
  for (const lab::Trained* run : {bb.get(), per_rank.get()}) {
    const bool alike = run == bb.get();
    const auto& m0 = run->ranks[0].mask;
    const auto& mk = run->ranks[last].mask;
    size_t differ = 0;
    for (size_t i = 0; i < m0.size() && i < mk.size(); ++i) differ += m0[i] != mk[i];
    g.say(fmt::format("{}: rank 0 {}... | rank {} {}... | {} of {} mask elements differ\n",
                      alike ? "every rank manual_seed(seed)" : "--seed-per-rank (manual_seed(seed + rank))", show(m0),
                      last, show(mk), differ, m0.size()));
    g.say(fmt::format("  parameters exact across ranks: {}\n", py(compare_ranks(*run, last).params_exact)));
  }
  g.say("  DDP does not touch the masks: ranks seeded alike drop the same units of their (different) batches,\n"
        "  ranks seeded per rank drop different ones. The parameters agree either way: DDP averages gradients,\n"
        "  whatever produced them.\n");

  g.say(fmt::format("\n# 3. Accuracy on the {} held-out digits (model.eval())\n", bb->test_size));
  g.say(fmt::format("DDP rank 0: {} | one device on the union of the shards{}: {}\n",
                    accuracy(bb->ranks[0].test_correct, bb->test_size), g.real() ? " (simulated by rank 0)" : "",
                    accuracy(bb->single_device_test_correct, bb->test_size)));
  g.say(
      fmt::format("  the one device normalises each step with the statistics of all {} samples, DDP's BatchNorm with\n"
                  "  each rank's {} (SyncBatchNorm shares them: ddp_sim --sync-batchnorm true), and its Dropout\n"
                  "  draws other masks: close, not equal.\n",
                  cfg.batch_size * cfg.world_size, cfg.batch_size));

  // --report (the simulator only): the run with DDP's defaults (losses, buckets, rank vs rank 0), and the three
  // runs' buffers and masks per rank: broadcast or not for the buffers, seeded alike or per rank for the masks.
  if (page.active()) {
    page.add_simulation(cfg, bb->sim);
    lab::record_table(fmt::format("rank {} vs rank 0, broadcast_buffers=True (DDP's default)", last),
                      lab::cmp_states(bb->ranks[last], bb->ranks[0]));
    lab::record_table(fmt::format("rank {} vs rank 0, broadcast_buffers=False", last),
                      lab::cmp_states(no_bb->ranks[last], no_bb->ranks[0]));
    page.add_per_rank("broadcast_buffers=True (DDP's default)", bb->cfg, bb->sim, true, false);
    page.add_per_rank("broadcast_buffers=False", no_bb->cfg, no_bb->sim, true, false);
    page.add_per_rank("every rank manual_seed(seed)", bb->cfg, bb->sim, false, true);
    page.add_per_rank("--seed-per-rank (manual_seed(seed + rank))", per_rank->cfg, per_rank->sim, false, true);
  }
  return 0;
}

int run(int argc, char** argv) {
  return lab::run_group_lab(argc, argv, {"epochs", "lr", "batch-size", "seed"}, kUsage, base_config, body);
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("005_cnn_digits", argc, argv, run); }
