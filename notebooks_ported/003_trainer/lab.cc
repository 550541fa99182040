// bazel run //notebooks_ported/003_trainer -- seed notebook 003: a Trainer over DDP.
// MyTrainDataset(2048) of rand(20) -> rand(1), Linear(20, 1), SGD 1e-2, batch 32 per rank,
// DistributedSampler with set_epoch; 4 ranks -> "Steps 16" per epoch, 1 rank -> "Steps 64".
#include <cstdio>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/lab_report.h"
#include "notebooks_ported/lab/seeding.h"
#include "src/base/compare.h"
#include "src/base/io.h"
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
  --dump FILE               (simulator; with --notebook-seeding also real ranks) per rank: losses, initial and
                            final parameters (JSON)
)";

// The lesson --notebook-seeding prints under its table.
constexpr const char* kSeedingLesson = R"(
What this shows: the notebook never calls torch.manual_seed, so each rank (a fresh process) started from
its own seed and built its own MyTrainDataset and its own Linear(20, 1) (exact: False above). The weights
still agree at the end (exact: True): DDP(model) broadcasts rank 0's parameters to every rank when it is
constructed, and every step averages the gradients over the ranks, so every rank applies the same update.
The data is another matter. DistributedSampler gives each rank its own share of the indices, assuming that
every rank holds the same dataset; here each rank indexed its own, so the ranks trained on {} different
random datasets, {} samples of each, not on one MyTrainDataset(2048) split {} ways. With random toy data
nothing is lost; with data built by random draws (a random split, a hand-made shuffle) the ranks would
silently train on different data. Seed every rank alike before it builds the data (the same
torch.manual_seed(S) at the top of main() on every rank): without --notebook-seeding this lab does that,
with S = 67280421310721.)";

std::vector<float> flat(const std::vector<const Parameter*>& params) {
  std::vector<float> v;
  for (const Parameter* p : params) v.insert(v.end(), p->data(), p->data() + p->numel());
  return v;
}

// The notebook's main() on every rank with no manual_seed anywhere: each rank draws its own seed, then its
// own MyTrainDataset(2048) and the Linear(20, 1) after it; DDP's broadcast and averaged steps do the rest.
// Rank 0 gathers what each rank drew and prints it against its own; --dump from rank 0, on any backend.
int rank_notebook_seeding(const ddp::Config& cfg, const std::string& device, const std::string& dump,
                          comm::Communicator& c) {
  const int rank = c.rank(), ws = c.world_size();
  ddp::Config mine = cfg;
  mine.world_size = ws;
  mine.seed = lab::fresh_process_seed();
  Generator data_gen, init_gen;
  const Dataset data = ddp::make_dataset(mine, data_gen);
  const Sequential initial = ddp::make_model(mine, rank, init_gen);  // before DDP(model) broadcasts rank 0's
  const ddp::RankResult res = ddp::train_rank(mine, c);
  const int64_t steps = (mine.num_samples_per_rank() + mine.batch_size - 1) / mine.batch_size;
  for (int64_t e = 0; e < mine.epochs; ++e) {
    lab::print_line(
        fmt::format("[{}: {} Epoch: {}, Batch size: {} | Steps {}]", device, rank, e, mine.batch_size, steps));
  }
  std::vector<std::string> losses;
  for (const auto& l : res.log) losses.push_back(json_float(l.loss));
  const std::vector<std::string> ranks =
      comm::all_gather_strings(c, fmt::format("{{\"seed\": {}, \"losses\": [{}], \"initial\": {}, \"params\": {}}}",
                                              mine.seed, fmt::join(losses, ", "), json_params(initial.parameters()),
                                              json_params(std::as_const(res.replica->model).parameters())));
  std::vector<float> mine_data(data.x.data(), data.x.data() + data.x.size());
  mine_data.insert(mine_data.end(), data.y.data(), data.y.data() + data.y.size());
  const std::vector<float> all_init = lab::gather_floats(c, flat(initial.parameters()));
  const std::vector<float> all_fin = lab::gather_floats(c, flat(std::as_const(res.replica->model).parameters()));
  const std::vector<float> all_data = lab::gather_floats(c, mine_data);
  const std::vector<uint64_t> seeds = lab::gather_seeds(c, mine.seed);
  if (rank != 0) return 0;
  std::string out;
  for (int k = 0; k < ws; ++k) out += lab::rank_seed_line(k, seeds[static_cast<size_t>(k)]) + "\n";
  std::vector<CmpResult> rows;
  for (int k = 1; k < ws; ++k) {
    rows.push_back(lab::vs_rank0(fmt::format("rank {} MyTrainDataset", k), all_data, k, ws));
    rows.push_back(lab::vs_rank0(fmt::format("rank {} Linear before DDP", k), all_init, k, ws));
    rows.push_back(lab::vs_rank0(fmt::format("rank {} after training", k), all_fin, k, ws));
  }
  const std::string title = "every rank vs rank 0, seeded as the notebook (not at all)";
  lab::record_table(title, rows);
  out += "\n# " + title + "\n";
  for (const CmpResult& r : rows) out += format_cmp(r) + "\n";
  lab::print_line(out + fmt::format(kSeedingLesson, ws, mine.num_samples_per_rank(), ws));
  if (!dump.empty()) {
    const std::string doc =
        fmt::format("{{\"world_size\": {}, \"ranks\": [{}]}}\n", ranks.size(), fmt::join(ranks, ",\n"));
    if (std::string why = write_file_atomic(dump, doc); !why.empty()) throw RunError("--dump: " + why);
  }
  return 0;
}

int run(int argc, char** argv) {
  auto known = lab::lab_flag_names();
  for (const char* f : {"max-epochs", "batch-size", "loss", "notebook-bugs", "notebook-seeding", "dump"})
    known.insert(f);
  const Flags flags(argc, argv, known, dist::with_runner_bare_flags({"notebook-bugs", "notebook-seeding"}));
  if (flags.help()) {
    std::printf("%s%s%s", kUsage, lab::notebook_seeding_usage("MyTrainDataset(2048) and Linear(20, 1)").c_str(),
                lab::lab_usage().c_str());
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
  cfg.seed = kDefaultSeed;  // fixed here, said in the output; the notebook seeds nothing (--notebook-seeding)
  cfg.init = ddp::InitKind::continue_;  // Linear(20, 1) draws right after the dataset, from the same generator
  cfg.epochs = flags.get_int("max-epochs", 5, 1, 1000);
  cfg.batch_size = flags.get_int("batch-size", 32, 1, 2048);
  const std::string dump = flags.get_string("dump", "");
  if (!dump.empty()) {
    if (std::string why = check_writable(dump); !why.empty()) throw UsageError("--dump: " + why);
  }
  const dist::RunFlags run = lab::lab_run_flags(flags);
  const std::string device = run.backend == dist::Backend::nccl ? "GPU" : "CPU";
  // The world size the ranks will run (and _run_epoch's step count is for): the default is the notebook's 4 ranks.
  const int64_t ws = run.real() ? (run.nproc != 0 ? run.nproc : 4) : (run.world_size != 0 ? run.world_size : 4);
  if (flags.get_bool("notebook-seeding", false)) {
    // Checked here, once, before any rank starts: the configuration every rank will run.
    ddp::Config c = cfg;
    c.world_size = ws;
    ddp::validate(c);
    return lab::run_on_ranks(
        flags, run, argc, argv, "003_trainer",
        {"--max-epochs", std::to_string(cfg.epochs), "--batch-size", std::to_string(cfg.batch_size), "--loss",
         ddp::loss_name(cfg.loss), "--notebook-seeding", "true"},
        [&](comm::Communicator& comm) { return rank_notebook_seeding(cfg, device, dump, comm); }, 4);
  }
  std::map<int64_t, int64_t> printed;  // rank -> last epoch announced
  std::vector<std::string> rank_json;
  const int status = lab::run_lab(
      flags, run, argc, argv, cfg,
      [&](const ddp::BatchLog& l) -> std::string {
        // _run_epoch prints once per epoch, before its first batch.
        auto it = printed.find(l.rank);
        if (it != printed.end() && it->second == l.epoch) return "";
        printed[l.rank] = l.epoch;
        ddp::Config c = cfg;
        c.world_size = ws;
        const int64_t steps = (c.num_samples_per_rank() + cfg.batch_size - 1) / cfg.batch_size;
        // Said once, by rank 0 before its first line: the seed is the lab's, not the notebook's.
        const std::string note =
            l.rank == 0 && l.epoch == 0 ? lab::fixed_seed_note("MyTrainDataset and Linear(20, 1)") + "\n" : "";
        return note + fmt::format("[{}: {} Epoch: {}, Batch size: {} | Steps {}]", device, l.rank, l.epoch,
                                  cfg.batch_size, steps);
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
  return std::max(status, lab::write_ranks_dump(run, "003_trainer", dump, rank_json));
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("003_trainer", argc, argv, run); }
