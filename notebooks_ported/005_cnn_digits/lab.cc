// bazel run //notebooks_ported/005_cnn_digits -- a CNN with BatchNorm and Dropout on the 8x8 digits under DDP
// (simulated ranks): what DDP does to BatchNorm's buffers, what it does not do to Dropout's masks, and the
// accuracy against one device. Every number is torch's bit for bit (tests/model_ddp_test); the claims are
// checked in PyTorch by reference.py beside this file.
#include <cstdio>

#include <fmt/format.h>

#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/lab_report.h"
#include "src/compare.h"
#include "src/ddp/trainer.h"
#include "src/flags.h"
#include "src/launch/run_flags.h"
#include "src/model/norm.h"
#include "src/report/report.h"

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: 005_cnn_digits [flags]
A CNN (--model cnn: conv, BatchNorm2d, ReLU, max-pool twice, Dropout(0.25), two Linears) on the digits,
simulated with DDP's semantics. Defaults in brackets.
  --world-size N   ranks, 2..8 [2]       --epochs E   [1]       --lr LR   SGD, momentum 0.9 [0.05]
  --batch-size B   per rank [32]         --seed S     manual_seed of every rank [12345]
  --report FILE.html   what it printed, the loss per rank, rank 1 vs rank 0, buffers and Dropout masks per rank
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

// Lines through lab::print_line: on stdout, and in the --report page's transcript.
void say(const std::string& text) {
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lab::print_line(text.substr(start, nl - start));
  }
  if (start < text.size()) lab::print_line(text.substr(start));
}

std::string accuracy(int64_t correct, int64_t total) {
  return fmt::format("{}/{} ({:.2f}%)", correct, total,
                     100.0 * static_cast<double>(correct) / static_cast<double>(total));
}

int run(int argc, char** argv) {
  const Flags flags(argc, argv, {"world-size", "epochs", "lr", "batch-size", "seed", "report"});
  if (flags.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  const ddp::Config cfg = base_config(flags);
  dist::RunFlags sim;  // this lab runs on the simulator only, at its own --world-size
  sim.backend = dist::Backend::sim;
  sim.world_size = static_cast<int>(cfg.world_size);
  lab::LabReport page(flags, sim, argc, argv);  // --report: its path checked now, before the runs
  say(fmt::format("Lab 005: the digits CNN under DDP, {} simulated ranks\n{}\n", cfg.world_size, ddp::describe(cfg)));

  const ddp::SimResult bb = ddp::simulate(cfg, /*single_device=*/true);
  ddp::Config no_bb_cfg = cfg;
  no_bb_cfg.broadcast_buffers = false;
  const ddp::SimResult no_bb = ddp::simulate(no_bb_cfg, false);
  ddp::Config per_rank_cfg = cfg;
  per_rank_cfg.seed_per_rank = true;
  const ddp::SimResult per_rank = ddp::simulate(per_rank_cfg, false);
  const size_t last = static_cast<size_t>(cfg.world_size - 1);

  say(fmt::format("\n# 1. BatchNorm's buffers (running_mean, running_var, num_batches_tracked), rank {} vs rank 0\n",
                  last));
  const Split a = compare_ranks(bb, last), b = compare_ranks(no_bb, last);
  const auto py = [](bool v) { return v ? "True" : "False"; };
  say(fmt::format("broadcast_buffers=True (DDP's default): parameters exact: {} | buffers exact: {}\n",
                  py(a.params_exact), py(a.buffers_exact)));
  say("  DDP gives every rank rank 0's buffers before each training forward, and again before the\n"
      "  model.eval() forward: every rank evaluates with the same running statistics.\n");
  say(fmt::format("broadcast_buffers=False: parameters exact: {} | buffers exact: {}{}\n", py(b.params_exact),
                  py(b.buffers_exact), b.buffers_exact ? "" : " (" + b.worst_buffer + ")"));
  std::string line =
      "  the all-reduce keeps the parameters equal, but each rank's running statistics average only the\n"
      "  batches it saw. Test accuracy per rank:";
  for (size_t r = 0; r < no_bb.test_correct.size(); ++r) {
    line += fmt::format(" rank {} {}{}", r, accuracy(no_bb.test_correct[r], no_bb.test_size),
                        r + 1 < no_bb.test_correct.size() ? "," : "\n");
  }
  say(line);

  say("\n# 2. Dropout's masks in the last training step (1 = kept and scaled by 1/(1-p), 0 = dropped)\n");
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
    say(fmt::format("{}: rank 0 {}... | rank {} {}... | {} of {} mask elements differ\n",
                    alike ? "every rank manual_seed(seed)" : "--seed-per-rank (manual_seed(seed + rank))", show(m0),
                    last, show(mk), differ, m0.size()));
    say(fmt::format("  parameters exact across ranks: {}\n", py(compare_ranks(*run, last).params_exact)));
  }
  say("  DDP does not touch the masks: ranks seeded alike drop the same units of their (different) batches,\n"
      "  ranks seeded per rank drop different ones. The parameters agree either way: DDP averages gradients,\n"
      "  whatever produced them.\n");

  say(fmt::format("\n# 3. Accuracy on the {} held-out digits (model.eval())\n", bb.test_size));
  say(fmt::format("DDP rank 0: {} | one device on the union of the shards: {}\n",
                  accuracy(bb.test_correct[0], bb.test_size), accuracy(bb.single_device_test_correct, bb.test_size)));
  say(
      fmt::format("  the one device normalises each step with the statistics of all {} samples, DDP's BatchNorm with\n"
                  "  each rank's {} (SyncBatchNorm would share them; torch runs it on GPUs only), and its Dropout\n"
                  "  draws other masks: close, not equal.\n",
                  cfg.batch_size * cfg.world_size, cfg.batch_size));

  // --report: the run with DDP's defaults (losses, buckets, rank vs rank 0), and the three runs' buffers and
  // masks per rank: broadcast or not for the buffers, seeded alike or per rank for the masks.
  if (page.active()) {
    page.add_simulation(cfg, bb);
    lab::record_table(fmt::format("rank {} vs rank 0, broadcast_buffers=True (DDP's default)", last),
                      cmp_models(bb.replicas[last]->model, bb.replicas[0]->model));
    lab::record_table(fmt::format("rank {} vs rank 0, broadcast_buffers=False", last),
                      cmp_models(no_bb.replicas[last]->model, no_bb.replicas[0]->model));
    page.add_per_rank("broadcast_buffers=True (DDP's default)", cfg, bb, true, false);
    page.add_per_rank("broadcast_buffers=False", no_bb_cfg, no_bb, true, false);
    page.add_per_rank("every rank manual_seed(seed)", cfg, bb, false, true);
    page.add_per_rank("--seed-per-rank (manual_seed(seed + rank))", per_rank_cfg, per_rank, false, true);
  }
  return page.write();
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("005_cnn_digits", argc, argv, run); }
