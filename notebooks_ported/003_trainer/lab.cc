// bazel run //notebooks_ported/003_trainer -- seed notebook 003: a Trainer over DDP.
// MyTrainDataset(2048) of rand(20) -> rand(1), Linear(20, 1), SGD 1e-2, batch 32 per rank,
// DistributedSampler with set_epoch; 4 ranks -> "Steps 16" per epoch, 1 rank -> "Steps 64".
#include <cstdio>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/lab_report.h"
#include "src/compare.h"
#include "src/io.h"
#include "src/launch/runner.h"
#include "src/report/report.h"

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: 003_trainer [flags]
Seed notebook 003 in C++. Defaults: 4 ranks, 5 epochs, batch 32, the notebook's data and model.
  --max-epochs E            [5]          --batch-size B  per rank [32]
  --loss mse|ce-probs       mse (the fix) or the notebook's F.cross_entropy on one float column, which
                            computes 0 and learns nothing [mse]
  --notebook-bugs           the notebook's DataLoader(shuffle=True, sampler=...): PyTorch refuses it
  --dump FILE               (simulator) per rank: losses, initial and final parameters (JSON)
)";

int run(int argc, char** argv) {
  auto known = lab::lab_flag_names();
  for (const char* f : {"max-epochs", "batch-size", "loss", "notebook-bugs", "dump"}) known.insert(f);
  const Flags flags(argc, argv, known, dist::with_runner_bare_flags({"notebook-bugs"}));
  if (flags.help()) {
    std::printf("%s%s", kUsage, lab::lab_usage().c_str());
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  if (flags.get_bool("notebook-bugs", false)) {
    // torch.utils.data.DataLoader checks this before anything runs.
    std::fprintf(stderr, "ValueError: sampler option is mutually exclusive with shuffle\n");
    return 1;
  }
  ddp::Config cfg;
  cfg.world_size = 4;
  cfg.dataset = ddp::DatasetKind::rand;
  cfg.samples = 2048;
  cfg.layers = {20, 1};
  cfg.loss = ddp::parse_loss(flags.get_choice("loss", "mse", {"mse", "ce-probs"}));
  cfg.lr = 1e-2;
  cfg.seed = kDefaultSeed;              // a fresh process: torch's default seed, no manual_seed in the notebook
  cfg.init = ddp::InitKind::continue_;  // Linear(20, 1) draws right after the dataset, from the same generator
  cfg.epochs = flags.get_int("max-epochs", 5, 1, 1000);
  cfg.batch_size = flags.get_int("batch-size", 32, 1, 2048);
  const std::string dump = flags.get_string("dump", "");
  if (!dump.empty()) {
    if (std::string why = check_writable(dump); !why.empty()) throw UsageError("--dump: " + why);
  }
  const std::string device = flags.get_string("backend", "sim") == "nccl" ? "GPU" : "CPU";
  std::map<int64_t, int64_t> printed;  // rank -> last epoch announced
  std::vector<std::string> rank_json;
  const int status = lab::run_lab(
      flags, argc, argv, cfg,
      [&](const ddp::BatchLog& l) -> std::string {
        // _run_epoch prints once per epoch, before its first batch.
        auto it = printed.find(l.rank);
        if (it != printed.end() && it->second == l.epoch) return "";
        printed[l.rank] = l.epoch;
        const int64_t ws = flags.get_string("backend", "sim") == "sim" ? flags.get_int("world-size", 4, 1, 64)
                                                                       : flags.get_int("nproc", 4, 1, 64);
        ddp::Config c = cfg;
        c.world_size = ws;
        const int64_t steps = (c.num_samples_per_rank() + cfg.batch_size - 1) / cfg.batch_size;
        return fmt::format("[{}: {} Epoch: {}, Batch size: {} | Steps {}]", device, l.rank, l.epoch, cfg.batch_size,
                           steps);
      },
      [&](lab::RankView& v) {
        Generator gen;
        ddp::Config c = cfg;
        c.world_size = v.world_size;
        const Sequential initial = ddp::make_model(c, v.rank, gen);
        if (v.rank == 0) {
          const std::vector<CmpResult> rows = cmp_models(v.replica->model, initial);
          std::string table;
          for (const CmpResult& row : rows) table += format_cmp(row) + "\n";
          lab::record_table("rank 0: trained model vs the model before training", rows);
          float max_abs_loss = 0;
          for (const auto& l : *v.log) max_abs_loss = std::max(max_abs_loss, std::abs(l.loss));
          lab::print_line(
              fmt::format("\n# rank 0: trained model vs the model before training\n{}largest |loss| seen: {}", table,
                          python_float_repr(max_abs_loss)));
          if (cfg.loss == ddp::LossKind::ce_probs) {
            lab::print_line(
                "F.cross_entropy(output, ys) with one output column and float targets treats ys as class\n"
                "probabilities: log_softmax over a single class is exactly 0, so every loss is 0 and every\n"
                "gradient is 0. The weights above never moved (exact: True). --loss mse trains for real.");
          }
        }
        std::vector<std::string> losses;
        for (const auto& l : *v.log) losses.push_back(json_float(l.loss));
        rank_json.push_back(fmt::format("{{\"losses\": [{}], \"initial\": {}, \"params\": {}}}",
                                        fmt::join(losses, ", "), json_params(initial.parameters()),
                                        json_params(std::as_const(v.replica->model).parameters())));
        return 0;
      });
  return std::max(status, lab::write_ranks_dump(flags, "003_trainer", dump, rank_json));
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("003_trainer", argc, argv, run); }
