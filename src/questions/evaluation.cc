// evaluation: each rank's accuracy on its DistributedSampler shard of the validation set, the ways scripts
// combine them, and one device's accuracy on the whole set.
#include <fmt/format.h>

#include "src/base/errors.h"
#include "src/data/data.h"
#include "src/data/torch_rng.h"
#include "src/ddp/replica.h"
#include "src/questions/topics.h"

namespace ddplab::questions {

void evaluation_defaults(ddp::Config& cfg) {
  cfg.world_size = 4;  // the 297 test digits do not divide by 4: DistributedSampler pads 3
  cfg.dataset = ddp::DatasetKind::digits;
  cfg.layers = {64, 32, 10};
  cfg.relu = true;
  cfg.loss = ddp::LossKind::ce;
  cfg.batch_size = 32;
  cfg.lr = 0.5;
  cfg.epochs = 3;
}

namespace {

struct Shards {
  std::vector<int64_t> correct, total;
  std::vector<std::vector<int64_t>> indices;
  int64_t sum_correct() const { int64_t s = 0; for (int64_t c : correct) s += c; return s; }
  int64_t sum_total() const { int64_t s = 0; for (int64_t t : total) s += t; return s; }
};

// Each rank evaluates its DistributedSampler(val, shuffle=False, drop_last) shard in one forward of its own
// replica (after DDP's eval broadcast of rank 0's buffers), as `(model(x).argmax(1) == y).sum()` does.
Shards evaluate_shards(const Run& run, const Dataset& val, bool drop_last) {
  const ddp::Config& cfg = *run.cfg;
  Shards s;
  for (int64_t r = 0; r < cfg.world_size; ++r) {
    const DistributedSampler sampler(val.size(), cfg.world_size, r, /*shuffle=*/false, 0, drop_last);
    std::vector<int64_t> idx = sampler.indices();
    s.correct.push_back(ddp::test_correct(cfg, run.res.replicas[static_cast<size_t>(r)]->model, subset(val, idx)));
    s.total.push_back(static_cast<int64_t>(idx.size()));
    s.indices.push_back(std::move(idx));
  }
  return s;
}

std::string pct(int64_t c, int64_t t) { return fmt::format("{:.2f}%", 100.0 * static_cast<double>(c) / static_cast<double>(t)); }

}  // namespace

void evaluation_check(const ddp::Config& cfg) {
  if (cfg.dataset != ddp::DatasetKind::digits) {
    throw UsageError("evaluation needs a validation set: --dataset digits (its 297 held-out digits; got --dataset " +
                     ddp::dataset_name(cfg.dataset) + ")");
  }
}

void evaluation_run(const ddp::Config& cfg) {
  const auto run = simulate("DDP", cfg);
  Generator gen;
  Dataset val;
  (void)ddp::make_dataset(cfg, gen, &val);
  const int64_t n = val.size(), w = cfg.world_size;
  const int64_t whole = ddp::test_correct(cfg, run->res.replicas[0]->model, val);
  fmt::print("validation set: {} digits; DistributedSampler(val, shuffle=False) at world_size {}\n\n", n, w);
  const Shards pad = evaluate_shards(*run, val, false), drop = evaluate_shards(*run, val, true);
  fmt::print("rank | drop_last=False: correct/total  accuracy | drop_last=True: correct/total  accuracy\n");
  double mean_pad = 0, mean_drop = 0;
  for (size_t r = 0; r < pad.correct.size(); ++r) {
    fmt::print("{:>4} | {:>17}/{:<5} {:>9} | {:>16}/{:<5} {:>9}\n", r, pad.correct[r], pad.total[r],
               pct(pad.correct[r], pad.total[r]), drop.correct[r], drop.total[r], pct(drop.correct[r], drop.total[r]));
    mean_pad += static_cast<double>(pad.correct[r]) / static_cast<double>(pad.total[r]) / static_cast<double>(w);
    mean_drop += static_cast<double>(drop.correct[r]) / static_cast<double>(drop.total[r]) / static_cast<double>(w);
  }
  const int64_t repeated = pad.sum_total() - n, dropped = n - drop.sum_total();
  // The padded samples: DistributedSampler repeats the first `repeated` indices; shard r holds r, r + w, ...
  int64_t repeated_correct = 0;
  std::vector<int64_t> repeats;
  for (int64_t i = 0; i < repeated; ++i) repeats.push_back(i);
  if (repeated > 0) repeated_correct = ddp::test_correct(cfg, run->res.replicas[0]->model, subset(val, repeats));
  fmt::print("\nnaive mean of the ranks' accuracies:      {:.2f}% (drop_last=True: {:.2f}%)\n", 100 * mean_pad,
             100 * mean_drop);
  fmt::print("all-reduced correct / all-reduced total:  {}/{} = {} (drop_last=True: {}/{} = {})\n", pad.sum_correct(),
             pad.sum_total(), pct(pad.sum_correct(), pad.sum_total()), drop.sum_correct(), drop.sum_total(),
             pct(drop.sum_correct(), drop.sum_total()));
  fmt::print("one device on the whole set:              {}/{} = {}\n\n", whole, n, pct(whole, n));
  fmt::print("answer: DDP's replicas are equal, so every rank's model is the one model; what differs is the samples "
             "counted: {}\n",
             repeated > 0
                 ? fmt::format("DistributedSampler pads {} to {} by repeating the first {} (validation sample{} "
                               "{}), so the all-reduced count sees them twice ({} of them correct): {} against one "
                               "device's {}",
                               n, pad.sum_total(), repeated, repeated > 1 ? "s" : "", fmt::join(repeats, ", "),
                               repeated_correct, pct(pad.sum_correct(), pad.sum_total()), pct(whole, n))
                 : fmt::format("{} divides by {}: no padding, and the all-reduced accuracy is one device's ({})", n, w,
                               pct(whole, n)));
  fmt::print("answer: drop_last=True drops {} sample{} instead ({} against {}); the naive mean of the ranks' "
             "accuracies equals the all-reduced one here because DistributedSampler gives every rank the same "
             "count; a DataLoader that drops a short batch on some ranks breaks that\n",
             dropped, dropped == 1 ? "" : "s", pct(drop.sum_correct(), drop.sum_total()), pct(whole, n));
  fmt::print("answer: for one device's number exactly: all-reduce correct and total over shards without the {} "
             "repeats, or evaluate the whole set on rank 0 through model.module (not the DDP wrapper: its forward "
             "may broadcast buffers, a collective the other ranks never join)\n",
             repeated);
}

}  // namespace ddplab::questions
