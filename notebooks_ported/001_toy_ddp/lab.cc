// bazel run //notebooks_ported/001_toy_ddp -- seed notebook 001: DDP on a 5-point toy set.
// A 2-30-20-2 ReLU MLP, cross-entropy, SGD lr 0.5, 3 epochs, DistributedSampler with a drop_last loader
// (batch 2), per-rank loss lines, then train and test accuracy per rank.
#include <cstdio>
#include <utility>

#include <fmt/format.h>

#include "notebooks_ported/lab/lab.h"
#include "notebooks_ported/lab/lab_report.h"
#include "src/base/compare.h"
#include "src/base/io.h"
#include "src/launch/runner.h"

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: 001_toy_ddp [flags]
Seed notebook 001 in C++. Defaults: the notebook's model, data and hyper-parameters, 2 ranks, set_epoch called.
  --epochs E                [3]
  --notebook-bugs           reproduce the notebook: never call sampler.set_epoch (same shuffle every epoch)
  --init same|per-rank      every rank seeds 123 (what the notebook does), or 123 + rank [same]
  --broadcast true|false    DDP's broadcast of rank 0's weights at construction [true]
  --dump FILE               (simulator) per rank: losses, sampler indices, accuracies, final parameters
)";

// compute_accuracy: argmax of the logits against the labels, over a loader's batches.
float accuracy(Module& model, const Dataset& data, const std::vector<std::vector<int64_t>>& batches, int rank) {
  int64_t correct = 0, total = 0;
  for (const auto& idx : batches) {
    const Matrix logits = model.forward(Tensor(data.gather_x(idx))).value;
    std::vector<std::string> cmp;
    for (size_t i = 0; i < idx.size(); ++i) {
      Eigen::Index pred;
      logits.row(static_cast<Eigen::Index>(i)).maxCoeff(&pred);
      const bool ok = pred == data.labels[static_cast<size_t>(idx[i])];
      correct += ok;
      ++total;
      cmp.push_back(ok ? "True" : "False");
    }
    lab::print_line(fmt::format("[rank{}]  compare is: tensor([{}])", rank, fmt::join(cmp, ", ")));
  }
  return total ? static_cast<float>(correct) / static_cast<float>(total) : 0.0f;
}

int run(int argc, char** argv) {
  auto known = lab::lab_flag_names();
  for (const char* f : {"epochs", "notebook-bugs", "init", "broadcast", "dump"}) known.insert(f);
  const Flags flags(argc, argv, known, dist::with_runner_bare_flags({"notebook-bugs"}));
  if (flags.help()) {
    std::printf("%s%s", kUsage, lab::lab_usage().c_str());
    return 0;
  }
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  ddp::Config cfg;
  cfg.world_size = 2;
  cfg.dataset = ddp::DatasetKind::toy;
  cfg.layers = {2, 30, 20, 2};
  cfg.relu = true;
  cfg.loss = ddp::LossKind::ce;
  cfg.lr = 0.5;
  cfg.seed = 123;
  cfg.epochs = flags.get_int("epochs", 3, 1, 1000);
  cfg.batch_size = 2;
  cfg.loader_drop_last = true;
  cfg.set_epoch = !flags.get_bool("notebook-bugs", false);
  cfg.init = ddp::parse_init(flags.get_choice("init", "same", {"same", "per-rank"}));
  cfg.broadcast = flags.get_bool("broadcast", true);
  const std::string dump = flags.get_string("dump", "");
  if (!dump.empty()) {
    if (std::string why = check_writable(dump); !why.empty()) throw UsageError("--dump: " + why);
  }
  Generator gen;
  const Dataset train = ddp::make_dataset(cfg, gen);
  Dataset test;
  test.x.resize(2, 2);
  test.x << -0.8f, 2.8f, 2.6f, -1.6f;
  test.labels = {0, 1};
  std::vector<std::string> rank_json;
  std::vector<float> rank0_params;
  const dist::RunFlags run = lab::lab_run_flags(flags);
  const int status = lab::run_lab(
      flags, run, argc, argv, cfg,
      [&](const ddp::BatchLog& l) {
        return fmt::format("[rank{}] Epoch: {:03d}/{:03d} | Batch size {:03d} | Train/Val Loss: {:.2f}", l.rank,
                           l.epoch + 1, cfg.epochs, l.batch_size, l.loss);
      },
      [&](lab::RankView& v) {
        ddp::Replica& rep = *v.replica;
        if (v.rank == 0) {
          const auto& first = (*v.indices)[0];
          lab::print_line(fmt::format(
              "DistributedSampler: 5 samples over {} ranks -> {} each; {} padded with a repeat of the first "
              "indices, and the drop_last loader (batch 2) then drops {} per rank every epoch",
              v.world_size, first.size(), first.size() * static_cast<size_t>(v.world_size) - 5, first.size() % 2));
        }
        std::string idx;
        for (const auto& e : *v.indices) idx += fmt::format(" [{}]", fmt::join(e, " "));
        lab::print_line(fmt::format("[rank{}] sampler indices per epoch:{}{}", v.rank, idx,
                                    cfg.set_epoch ? "" : "   (no set_epoch: the same order every epoch)"));
        const float train_acc = accuracy(rep.model, train, rep.loader.iter(), v.rank);
        lab::print_line(fmt::format("[rank{}] Training accuracy {}", v.rank, python_float_repr(train_acc)));
        const float test_acc = accuracy(rep.model, test, {{0, 1}}, v.rank);
        lab::print_line(fmt::format("[rank{}] Test accuracy {}", v.rank, python_float_repr(test_acc)));
        // DDP's promise: the last rank's parameters vs rank 0's (both in this process, or gathered).
        std::vector<float> mine;
        for (const Parameter* p : rep.model.parameters()) mine.insert(mine.end(), p->data(), p->data() + p->numel());
        if (v.comm) {
          std::vector<float> all(mine.size() * static_cast<size_t>(v.world_size));
          v.comm->all_gather(mine.data(), mine.size() * sizeof(float), all.data());
          rank0_params.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(mine.size()));
        } else if (v.rank == 0) {
          rank0_params = mine;
        }
        if (v.rank + 1 == v.world_size && v.world_size > 1) {
          std::vector<CmpResult> rows;
          std::string table;
          size_t o = 0;
          for (const Parameter* p : rep.model.parameters()) {
            rows.push_back(cmp(p->name, mine.data() + o, rank0_params.data() + o, p->numel()));
            table += "\n" + format_cmp(rows.back());
            o += static_cast<size_t>(p->numel());
          }
          const std::string title = fmt::format("rank {} vs rank 0 after training", v.rank);
          lab::record_table(title, rows);
          lab::print_line("# " + title + table);
        }
        std::vector<std::string> losses;
        for (const auto& l : *v.log) losses.push_back(json_float(l.loss));
        std::vector<std::string> epochs;
        for (const auto& e : *v.indices) epochs.push_back(fmt::format("[{}]", fmt::join(e, ", ")));
        rank_json.push_back(
            fmt::format("{{\"losses\": [{}], \"indices\": [{}], \"train_acc\": {}, \"test_acc\": {}, "
                        "\"params\": {}}}",
                        fmt::join(losses, ", "), fmt::join(epochs, ", "), json_float(train_acc), json_float(test_acc),
                        json_params(std::as_const(rep.model).parameters())));
        return 0;
      });
  return std::max(status, lab::write_ranks_dump(run, "001_toy_ddp", dump, rank_json));
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("001_toy_ddp", argc, argv, run); }
