// accumulation: no_sync() on K - 1 micro-batches and a synchronised K-th, with loss.backward() or
// (loss / K).backward(), against one device at a K times larger batch.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "src/base/errors.h"

#include "src/questions/topics.h"

namespace ddplab::questions {

void accumulation_defaults(ddp::Config& cfg) {
  cfg.world_size = 2;
  cfg.batch_size = 4;
  cfg.no_sync = 4;
  cfg.samples = 96;  // 3 steps of 2 ranks x 4 micro-batches x 4 samples
  cfg.epochs = 2;
  cfg.lr = 0.05;
}

void accumulation_check(const ddp::Config& cfg) {
  if (cfg.no_sync < 2) {
    throw UsageError("accumulation compares K >= 2 micro-batches (got --no-sync " + std::to_string(cfg.no_sync) +
                     ": nothing accumulates)");
  }
}

namespace {

// The misuses (--sync-on first, never) against the correct run: how far each rank's replica ends from rank 0's.
void misuse(const Run& correct) {
  const int64_t k = correct.cfg->no_sync;
  fmt::print("\n# the misuse: the synchronised micro-batch is not the last (--sync-on), (loss / {}).backward()\n", k);
  std::vector<std::pair<std::string, ddp::SyncOn>> cases = {
      {"last micro-batch outside no_sync() (correct)", ddp::SyncOn::last},
      {"first micro-batch outside no_sync()", ddp::SyncOn::first},
      {"every micro-batch inside no_sync()", ddp::SyncOn::never}};
  float first_diff = 0, never_diff = 0;
  for (const auto& [label, on] : cases) {
    std::unique_ptr<Run> own;
    const Run* run = &correct;
    if (on != ddp::SyncOn::last) {
      ddp::Config c = *correct.cfg;
      c.sync_on = on;
      own = simulate(label, c);
      run = own.get();
    }
    float worst = 0;
    for (size_t r = 1; r < run->res.replicas.size(); ++r) worst = std::max(worst, cmp_params(*run, *run, r, 0).maxdiff);
    fmt::print("{:<46} | ranks' replicas after training: {} | max |rank r - rank 0|: {}\n", label,
               worst == 0 ? "bitwise equal" : "differ", py(worst));
    if (on == ddp::SyncOn::first) first_diff = worst;
    if (on == ddp::SyncOn::never) never_diff = worst;
  }
  fmt::print("answer: synchronising the first micro-batch all-reduces only its gradient (the {} after it add each "
             "rank's own), and never synchronising all-reduces nothing: the ranks step on different .grad and their "
             "replicas drift apart ({} and {} here), and torch raises no error\n",
             k - 1, py(first_diff), py(never_diff));
}

}  // namespace

void accumulation_run(const ddp::Config& cfg) {
  const int64_t w = cfg.world_size, b = cfg.batch_size, k = cfg.no_sync, big = w * k * b;
  fmt::print("DDP: {} ranks, each accumulating {} micro-batches of {} under no_sync() before a synchronised one: {} "
             "samples per optimizer step, the samples one device takes in a batch of {}\n\n",
             w, k, b, big, big);
  ddp::Config divide = cfg, sum = cfg;
  divide.sync_on = sum.sync_on = ddp::SyncOn::last;  // the misuses come after, against these
  divide.no_sync_loss = ddp::NoSyncLoss::divide;
  sum.no_sync_loss = ddp::NoSyncLoss::sum;
  const auto div_run = simulate(fmt::format("DDP, (loss / {}).backward()", k), divide);
  const auto sum_run = simulate("DDP, loss.backward()", sum);
  ddp::Config one = one_device(cfg, big);
  one.no_sync = 1;
  const auto one_run = simulate(fmt::format("one device, batch {}", big), one);
  std::vector<const Run*> table = {div_run.get(), sum_run.get(), one_run.get()};
  std::unique_ptr<Run> one_k;
  if (cfg.optimizer == ddp::OptimizerKind::sgd) {
    ddp::Config c = one;
    c.lr = cfg.lr * static_cast<double>(k);
    one_k = simulate(fmt::format("one device, batch {}, lr x {}", big, k), c);
    table.push_back(one_k.get());
  }
  fmt::print("{}\n", loss_table(table));
  const ModelCmp d = cmp_params(*div_run, *one_run), s = cmp_params(*sum_run, *one_run);
  fmt::print("{:<32} vs one device at batch {}: {}\n", div_run->label, big, format_model_cmp(d));
  fmt::print("{:<32} vs one device at batch {}: {}\n", sum_run->label, big, format_model_cmp(s));
  ModelCmp sk;
  if (one_k) {
    sk = cmp_params(*sum_run, *one_k);
    fmt::print("{:<32} vs {}: {}\n", sum_run->label, one_k->label, format_model_cmp(sk));
  }
  const std::string layers = per_rank_layers(cfg);
  fmt::print("\nanswer: with (loss / {}).backward() the accumulated .grad is the mean over the {} micro-batches, "
             "and DDP averages it over the {} ranks: {} one device at batch {} ({}, maxdiff {}){}\n",
             k, k, w, d.all_close() ? "the gradient of" : "close to the gradient of", big,
             d.all_exact() ? "exactly" : (d.all_close() ? "allclose, not exactly" : "not allclose here"),
             py(d.maxdiff),
             d.all_exact() ? ""
                           : (layers.empty() ? fmt::format(": the mean of {} x {} means of {} adds in another order "
                                                           "than one mean of {}{}",
                                                           w, k, b, big,
                                                           (k & (k - 1)) == 0 && (w & (w - 1)) == 0
                                                               ? " (dividing by a power of two is exact: the order of "
                                                                 "the additions alone moves the bits)"
                                                               : fmt::format(", and 1/{} is rounded", (k & (k - 1)) ? k : w))
                                             : ": " + layers));
  fmt::print("answer: with loss.backward() on each micro-batch .grad holds the sum of {} micro-batch gradients, {} "
             "times one big batch's{}\n",
             k, k,
             one_k ? fmt::format(": for SGD that is lr x {} ({} one device's at lr x {}, maxdiff {})", k,
                                 sk.all_close() ? "allclose to" : "not even allclose to", k, py(sk.maxdiff))
                   : ": Adam normalises the scale away, SGD would take lr x K");
  fmt::print("answer: only the last micro-batch may run outside no_sync(): its backward all-reduces the whole "
             "accumulated .grad; the {} before it stay on their rank, so every rank still takes the same step\n",
             k - 1);
  misuse(*div_run);
}

}  // namespace ddplab::questions
