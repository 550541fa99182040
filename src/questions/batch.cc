// batch-size: is batch_size per process or global? lr-scaling: should the learning rate grow with the
// number of ranks, and why does a DDP run train worse than one device?
#include <cmath>

#include <fmt/format.h>

#include "src/questions/topics.h"

namespace ddplab::questions {

void batch_size_defaults(ddp::Config& cfg) {
  cfg.world_size = 4;
  cfg.samples = 96;  // 4 ranks x 8 per batch x 3 steps: no padding, no short batch
  cfg.epochs = 2;
  cfg.lr = 0.05;
}

void batch_size_run(const ddp::Config& cfg) {
  const int64_t w = cfg.world_size, b = cfg.batch_size, n = cfg.dataset_size();
  const int64_t per_rank = cfg.num_samples_per_rank(), padded = per_rank * w - n;
  fmt::print("DDP: world_size {} x batch_size {} per process: each optimizer step trains on {} x {} = {} samples "
             "(the effective batch)\n",
             w, b, w, b, w * b);
  fmt::print("an epoch of {} samples: DistributedSampler gives each rank {} ({}), the DataLoader {} batches of at "
             "most {}: {} steps per epoch\n",
             n, per_rank,
             padded > 0 ? fmt::format("ceil({} / {}), {} repeated to pad", n, w, padded)
                        : fmt::format("{} / {}", n, w),
             cfg.batches_per_epoch(), b, steps_per_epoch(cfg));
  const auto ddp_run = simulate(fmt::format("DDP {} x {}", w, b), cfg);
  const auto small = simulate(fmt::format("one device, batch {}", b), one_device(cfg, b));
  const auto big = simulate(fmt::format("one device, batch {}", w * b), one_device(cfg, w * b));
  fmt::print("\n{}\n", loss_table({ddp_run.get(), small.get(), big.get()}));
  const ModelCmp vs_big = cmp_params(*ddp_run, *big), vs_small = cmp_params(*ddp_run, *small);
  fmt::print("DDP vs {:<22} {}\n", big->label + ":", format_model_cmp(vs_big));
  fmt::print("DDP vs {:<22} {}\n\n", small->label + ":", format_model_cmp(vs_small));
  fmt::print("answer: batch_size is per process: DDP at world_size {} and batch_size {} steps like one device at batch "
             "{} x {} = {} ({} steps per epoch, not {})\n",
             w, b, w, b, w * b, steps_per_epoch(cfg), steps_per_epoch(*small->cfg));
  const std::string layers = per_rank_layers(cfg);
  if (vs_big.all_close()) {
    fmt::print("answer: its parameters equal one device's at batch {} {} (maxdiff {}): the same samples per step, "
               "their mean gradient taken as {} means of {} averaged, in another order of additions\n",
               w * b, vs_big.all_exact() ? "exactly" : "allclose, not exactly", py(vs_big.maxdiff), w, b);
  } else if (!layers.empty()) {
    fmt::print("answer: here not even allclose to one device at batch {} (maxdiff {}): the model has {}\n",
               w * b, py(vs_big.maxdiff), layers);
  } else if (padded > 0 || per_rank % b != 0) {
    fmt::print("answer: here not allclose to one device at batch {} (maxdiff {}): {} so the last steps hold other "
               "samples; with --samples a multiple of {} the two take the same steps\n",
               w * b, py(vs_big.maxdiff),
               padded > 0 ? fmt::format("DistributedSampler repeated {} samples to pad the epoch,", padded)
                          : std::string("each rank's last batch is short,"),
               w * b);
  } else {
    fmt::print("answer: not allclose to one device at batch {} (maxdiff {}): rounding grew over the steps\n", w * b,
               py(vs_big.maxdiff));
  }
}

void lr_scaling_defaults(ddp::Config& cfg) {
  cfg.world_size = 4;
  cfg.samples = 256;
  cfg.layers = {6, 16, 2};
  cfg.relu = true;
  cfg.epochs = 4;
  cfg.lr = 0.02;
}

void lr_scaling_run(const ddp::Config& cfg) {
  const int64_t w = cfg.world_size, b = cfg.batch_size;
  const double sq = std::sqrt(static_cast<double>(w));
  fmt::print("one device at batch {} and lr {} against DDP at world_size {} (batch {} per rank, {} per step) at lr, "
             "{} x lr and sqrt({}) x lr\n\n",
             b, py(cfg.lr), w, b, w * b, w, w);
  const auto one = simulate(fmt::format("one device, batch {}, lr {}", b, py(cfg.lr)), one_device(cfg, b));
  std::vector<std::unique_ptr<Run>> runs;
  for (const auto& [name, lr] : {std::pair{std::string("lr"), cfg.lr},
                                 std::pair{fmt::format("{} x lr", w), cfg.lr * static_cast<double>(w)},
                                 std::pair{fmt::format("sqrt({}) x lr", w), cfg.lr * sq}}) {
    ddp::Config c = cfg;
    c.lr = lr;
    runs.push_back(simulate(fmt::format("DDP {} x {}, {} = {}", w, b, name, py(lr)), c));
  }
  fmt::print("{}\n", loss_table({one.get(), runs[0].get(), runs[1].get(), runs[2].get()}));
  const double target = one->final_loss;
  size_t best = 0;
  for (size_t i = 1; i < runs.size(); ++i) {
    if (std::abs(runs[i]->final_loss - target) < std::abs(runs[best]->final_loss - target)) best = i;
  }
  const double at_lr = runs[0]->final_loss;
  fmt::print("answer: at the same lr DDP takes {} times fewer steps per epoch ({} against {}), each on a {} times "
             "larger batch whose mean gradient is no larger, so per epoch it moves less: {}\n",
             w, steps_per_epoch(cfg), steps_per_epoch(*one->cfg), w,
             at_lr > target ? fmt::format("its loss after {} epoch(s) is {}, one device's {}; that, not a bug, is why "
                                          "a DDP run at the same lr trains slower per epoch",
                                          cfg.epochs, py(static_cast<float>(at_lr)), py(static_cast<float>(target)))
                            : fmt::format("here its loss after {} epoch(s) is still {} against one device's {} (the "
                                          "smaller batch's noisier steps cost one device as much)",
                                          cfg.epochs, py(static_cast<float>(at_lr)), py(static_cast<float>(target))));
  fmt::print("answer: scaling the lr with the number of ranks makes up for the fewer steps (the linear scaling rule, "
             "{} x lr; sqrt({}) x lr is the cautious one): here {} ends nearest one device's loss ({}); a rule of "
             "thumb, not a law: too large an lr diverges, and a warmup helps at large world sizes\n",
             w, w, runs[best]->label, py(static_cast<float>(runs[best]->final_loss)));
  if (const std::string layers = per_rank_layers(cfg); !layers.empty()) {
    fmt::print("answer: this model also has {}: DDP's ranks do not compute one device's forward even at batch "
               "{} (ddp_questions batch-size shows by how much)\n",
               layers, w * b);
  }
}

}  // namespace ddplab::questions
