#include "src/ddp/trainer.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "src/ddp/rank_sync.h"
#include "src/ddp/sync_bn_group.h"
#include "src/base/parallel.h"

namespace ddplab::ddp {
namespace {

// Wraps the loop's all-reduce: `tell` hears how many buckets each synchronised backward reduced.
void tell_allreduces(LoopSync& sync, const std::function<void(size_t)>& tell) {
  sync.allreduce = [inner = sync.allreduce, tell](const std::vector<Reducer*>& reducers, size_t n) {
    tell(std::min(n, reducers[0]->num_buckets()));
    return inner(reducers, n);
  };
}

}  // namespace

RankResult train_rank(const Config& cfg, comm::Communicator& comm) {
  return train_rank(cfg, comm, cpu_kernels(cfg.kernels));
}

TrainLog train_over(const Config& cfg, comm::Communicator& comm, TrainingRank& rank, bool progress, double* seconds,
                    const std::function<void(size_t buckets_reduced)>& on_allreduce) {
  init_ddp(cfg, rank, [&](TrainingRank& r) { broadcast_model(comm, r); });
  rank.reducer->set_backend_averages(cfg.average == Average::avg && comm.native_avg());
  rank.start();
  CommunicatorSync over(cfg, comm);
  LoopSync sync = over.sync(progress);
  if (on_allreduce) tell_allreduces(sync, on_allreduce);
  const auto t0 = std::chrono::steady_clock::now();
  TrainLog trained = run_training(cfg, {&rank}, sync);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  comm.context = "after training";  // what the caller exchanges next (ddp_verify's gathers)
  return trained;
}

RankResult train_rank(const Config& cfg, comm::Communicator& comm, const LinearKernels& kernels) {
  RankResult res;
  Generator data_gen;
  Dataset test;
  const Dataset data = make_dataset(cfg, data_gen, &test);
  res.replica = std::make_unique<Replica>(cfg, comm.rank());
  Replica& rep = *res.replica;
  rep.data = &data;
  rep.model.set_kernels(kernels);
  CommunicatorGroup bn_group(comm);  // --sync-batchnorm: SyncBatchNorm's collectives on this rank's communicator
  set_process_group(rep.model, &bn_group);
  TrainLog trained = train_over(cfg, comm, rep, comm.rank() == 0, &res.train_seconds);
  set_process_group(rep.model, nullptr);  // bn_group ends here; the model lives on in res
  res.log = std::move(trained.log);
  res.optimizer_steps = trained.optimizer_steps;
  res.hook_reports = std::move(trained.hook_reports);
  res.error = trained.error;
  for (auto& e : trained.sampler_indices) res.sampler_indices.push_back(e[0]);
  if (test.size() > 0) {  // DDP(model).eval() forward: the buffers are rank 0's again first
    if (cfg.broadcast_buffers && !rep.model.buffers().empty()) {
      comm.context = "model.eval(): the buffer broadcast before the test forward";
      broadcast_buffers(comm, rep, cfg.join ? comm.world_size() - 1 : 0);
    }
    res.test_correct = test_correct(cfg, rep.model, test);
    res.test_size = test.size();
  }
  return res;
}

TrainLog simulate_ranks(const Config& cfg, const std::vector<TrainingRank*>& local, ThreadPool* pool,
                        const SimHooks& hooks, bool progress, Replica* single, bool lockstep) {
  // DDP(model): broadcast rank 0's parameters and buffers, then build the reducer.
  for (TrainingRank* r : local) {
    init_ddp(cfg, *r, [&](TrainingRank& to) {
      copy_parameters({&to}, *local[0]);
      copy_buffers({&to}, *local[0]);
    });
  }
  for (TrainingRank* r : local) r->start();
  // Only a hook needs whole prepared buckets (world_size x the largest bucket); without one every bucket
  // goes block by block through a small buffer per thread, the path //bench:sim_step measures.
  InProcessSync in_process(cfg, pool, hooks.before_allreduce);
  LoopSync sync = in_process.sync(progress);
  sync.lockstep = lockstep;
  if (hooks.replace_allreduce) sync.allreduce = hooks.replace_allreduce;
  if (hooks.on_allreduce) tell_allreduces(sync, hooks.on_allreduce);
  if (hooks.after_allreduce) {
    sync.allreduce = [inner = sync.allreduce, after = hooks.after_allreduce](const std::vector<Reducer*>& reducers,
                                                                              size_t n) {
      auto reports = inner(reducers, n);
      after(reducers);
      return reports;
    };
  }
  return run_training(cfg, local, sync, single);
}

SimResult simulate(const Config& cfg, bool single_device, const SimHooks& hooks) {
  SimResult res;
  ThreadPool pool(cfg.threads > 0 ? cfg.threads : available_cores());
  Generator data_gen;
  Dataset test;
  const Dataset data = make_dataset(cfg, data_gen, &test);
  // Rank 0 draws its initialisation; ranks seeded alike copy it (parameters, buffers, generator state:
  // the same bits as drawing), ranks seeded per rank draw their own, side by side. The single device
  // is rank 0's model, copied before DDP(model) reseeds anything.
  res.replicas.resize(static_cast<size_t>(cfg.world_size));
  res.replicas[0] = std::make_unique<Replica>(cfg, 0);
  if (single_device) res.single_device = std::make_unique<Replica>(cfg, 0, *res.replicas[0]);
  parallel_for(&pool, res.replicas.size() - 1, 4.0 * static_cast<double>(footprint(cfg).parameters), [&](size_t k) {
    const int64_t r = static_cast<int64_t>(k) + 1;
    res.replicas[k + 1] =
        draws_alike(cfg) ? std::make_unique<Replica>(cfg, r, *res.replicas[0]) : std::make_unique<Replica>(cfg, r);
  });
  std::vector<TrainingRank*> local;
  for (auto& rep : res.replicas) {
    rep->data = &data;
    local.push_back(rep.get());
  }
  if (single_device) {
    // The single device takes the ranks' batches concatenated; its own sampler and loader go unused. It is
    // one model with the plain optimizer, whatever the ranks shard.
    res.single_device->data = &data;
    if (cfg.seed_per_rank) res.single_device->gen.manual_seed(cfg.seed);  // as rank 0
    if (cfg.zero) res.single_device->optimizer = make_optimizer(cfg, res.single_device->model);
  }
  std::unique_ptr<LocalSyncBatchNorm> bn;  // --sync-batchnorm: the ranks meet inside forward and backward
  if (cfg.sync_batchnorm && cfg.world_size > 1) {
    bn = std::make_unique<LocalSyncBatchNorm>(cfg.world_size, cfg.allreduce);
    for (size_t r = 0; r < res.replicas.size(); ++r) set_process_group(res.replicas[r]->model, bn->groups[r].get());
  }
  static_cast<TrainLog&>(res) = simulate_ranks(cfg, local, &pool, hooks, true, res.single_device.get(), bn != nullptr);
  for (auto& rep : res.replicas) set_process_group(rep->model, nullptr);
  if (test.size() > 0) {
    // DDP(model).eval() forward broadcasts first (under Join from the highest rank: all are active)
    if (cfg.broadcast_buffers) copy_buffers(local, *local[static_cast<size_t>(cfg.join ? cfg.world_size - 1 : 0)]);
    res.test_size = test.size();
    for (auto& rep : res.replicas) res.test_correct.push_back(test_correct(cfg, rep->model, test));
    if (res.single_device) res.single_device_test_correct = test_correct(cfg, res.single_device->model, test);
  }
  return res;
}

std::string progress_line(const BatchLog& l, int64_t epochs) {
  return fmt::format("[rank{}] Epoch: {:03d}/{:03d} | Batch size {:03d} | Loss: {:.2f}", l.rank, l.epoch + 1, epochs,
                     l.batch_size, l.loss);
}

}  // namespace ddplab::ddp
