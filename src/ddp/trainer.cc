#include "src/ddp/trainer.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "src/ddp/bucket_sync.h"
#include "src/ddp/hooked_sync.h"
#include "src/ddp/join.h"
#include "src/ddp/zero.h"
#include "src/errors.h"
#include "src/model/spec.h"
#include "src/progress.h"

#include <fmt/format.h>

namespace ddplab::ddp {

Dataset make_dataset(const Config& cfg, Generator& gen, Dataset* test) {
  const int64_t in = cfg.layers.front(), out = cfg.layers.back();
  Dataset d;
  if (cfg.dataset == DatasetKind::digits) {
    const Dataset all = load_digits(cfg.data.empty() ? kDigitsDefaultPath : cfg.data);
    gen.manual_seed(cfg.seed);
    const std::vector<int64_t> perm = gen.randperm(kDigitsTotal);
    if (test) *test = subset(all, {perm.begin() + kDigitsTrain, perm.end()});
    return subset(all, {perm.begin(), perm.begin() + kDigitsTrain});
  }
  if (cfg.dataset == DatasetKind::toy) {
    d.x.resize(5, 2);
    d.x << -1.2f, 3.1f, -0.9f, 2.9f, -0.5f, 2.6f, 2.3f, -1.1f, 2.7f, -1.5f;
    d.labels = {0, 0, 0, 1, 1};
    d.y = Matrix::Zero(5, out);
    for (int64_t i = 0; i < 5; ++i) d.y(i, d.labels[static_cast<size_t>(i)]) = 1.0f;
    return d;
  }
  if (cfg.dataset == DatasetKind::rand) {  // MyTrainDataset: manual_seed, then rand(in), rand(out) per sample
    gen.manual_seed(cfg.seed);
    d.x.resize(cfg.samples, in);
    d.y.resize(cfg.samples, out);
    for (int64_t i = 0; i < cfg.samples; ++i) {
      gen.uniform_(d.x.row(i).data(), in);
      gen.uniform_(d.y.row(i).data(), out);
    }
  } else {
    d = random_tensor_dataset(cfg.samples, in, out, cfg.seed, gen);
  }
  for (int64_t i = 0; i < d.size(); ++i) {  // torch.argmax: the first index of the maximum
    Eigen::Index arg;
    d.y.row(i).maxCoeff(&arg);
    d.labels.push_back(arg);
  }
  return d;
}

Sequential make_model(const Config& cfg, int64_t rank, Generator& gen) {
  if (cfg.init == InitKind::continue_) {
    make_dataset(cfg, gen);  // the model's draws follow the dataset's, from the same generator
  } else {
    gen.manual_seed(cfg.init == InitKind::per_rank ? cfg.seed + static_cast<uint64_t>(rank) : cfg.seed);
  }
  // The MLP is nn.Sequential held as `self.layers` (names layers.0.weight, ...); a spec is the model itself.
  Sequential m = build_model(plan_model(cfg.model_spec(), cfg.sample_shape()), cfg.is_mlp() ? "layers" : "", gen);
  m.set_kernels(cpu_kernels(cfg.kernels));
  return m;
}

namespace {

std::unique_ptr<Optimizer> optimizer_over(const Config& cfg, std::vector<Parameter*> params) {
  if (cfg.optimizer == OptimizerKind::adam) {
    AdamOptions o;
    o.lr = cfg.lr;
    return std::make_unique<Adam>(std::move(params), o);
  }
  SGDOptions o;
  o.lr = cfg.lr;
  o.momentum = cfg.momentum;
  return std::make_unique<SGD>(std::move(params), o);
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const Config& cfg, Module& model, int64_t rank) {
  if (!cfg.zero || rank < 0) return optimizer_over(cfg, model.parameters());
  return std::make_unique<ZeroRedundancyOptimizer>(
      model.parameters(), cfg.world_size, rank,
      [&cfg](std::vector<Parameter*> shard) { return optimizer_over(cfg, std::move(shard)); });
}

LossResult compute_loss(const Config& cfg, const Matrix& out, const Dataset& data, const std::vector<int64_t>& idx) {
  if (cfg.loss == LossKind::ce) return cross_entropy(out, data.gather_labels(idx));
  if (cfg.loss == LossKind::ce_probs) return cross_entropy_probs(out, data.gather_y(idx));
  return mse_loss(out, data.gather_y(idx));
}

Replica::Replica(const Config& c, int64_t r)
    : rank(r),
      model(make_model(c, r, gen)),
      optimizer(make_optimizer(c, model, r)),
      sampler(c.dataset_size(), c.world_size, r, c.shuffle, c.sampler_seed, c.drop_last),
      loader(sampler, c.batch_size, c.loader_drop_last, gen),
      cfg(c) {}

namespace {

// The model's layers with nothing drawn (zero parameters), on `gen` (Dropout's masks) and cfg's kernels.
Sequential undrawn_model(const Config& cfg, Generator& gen) {
  Sequential m = build_model(plan_model(cfg.model_spec(), cfg.sample_shape()), cfg.is_mlp() ? "layers" : "", gen,
                             /*draw=*/false);
  m.set_kernels(cpu_kernels(cfg.kernels));
  return m;
}

void copy_parameters(const Module& from, Module& to);

}  // namespace

Replica::Replica(const Config& c, int64_t r, const Replica& like)
    : rank(r),
      gen(like.gen),
      model(undrawn_model(c, gen)),
      optimizer(make_optimizer(c, model, r)),
      sampler(c.dataset_size(), c.world_size, r, c.shuffle, c.sampler_seed, c.drop_last),
      loader(sampler, c.batch_size, c.loader_drop_last, gen),
      cfg(c) {
  copy_parameters(like.model, model);
  copy_buffers(like.model, model);
}

namespace {

Tensor input_batch(const Config& cfg, const Dataset& data, const std::vector<int64_t>& idx) {
  std::vector<int64_t> shape = {static_cast<int64_t>(idx.size())};
  for (int64_t d : cfg.sample_shape()) shape.push_back(d);
  return Tensor(shape, data.gather_x(idx));
}

void copy_parameters(const Module& from, Module& to) {
  const auto src = from.parameters();
  const auto dst = to.parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i]->value = src[i]->value;
}

}  // namespace

float Replica::forward_backward(const Dataset& data, const std::vector<int64_t>& idx) {
  const Tensor out = model.forward(input_batch(cfg, data, idx));
  LossResult l = compute_loss(cfg, out.value, data, idx);
  ready.clear();
  model.backward(Tensor(out.shape, std::move(l.grad)), ready);
  return l.loss;
}

void copy_buffers(const Module& from, Module& to) {
  const auto src = from.buffers();
  const auto dst = to.buffers();
  for (size_t i = 0; i < src.size(); ++i) {
    dst[i]->value = src[i]->value;
    dst[i]->count = src[i]->count;
  }
}

int64_t test_correct(const Config& cfg, Module& model, const Dataset& test) {
  std::vector<int64_t> all(static_cast<size_t>(test.size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  model.eval();
  const Tensor out = model.forward(input_batch(cfg, test, all));
  model.train();
  int64_t correct = 0;
  for (int64_t i = 0; i < out.value.rows(); ++i) {  // torch.argmax: the first index of the maximum
    Eigen::Index arg;
    out.value.row(i).maxCoeff(&arg);
    correct += arg == test.labels[static_cast<size_t>(i)];
  }
  return correct;
}

void InProcessAllreduce::run(const std::vector<Reducer*>& reducers, collective::Algorithm algorithm, const Hook& before,
                             ThreadPool* pool, size_t num_buckets) {
  const Reducer& layout = *reducers[0];
  std::vector<float*> bufs;
  if (before) {  // the hook sees whole prepared buckets: N buffers of the largest
    workspace_.resize(reducers.size());
    for (auto& w : workspace_) w.resize(std::max(w.size(), layout.max_bucket_numel()));
    for (auto& w : workspace_) bufs.push_back(w.data());
  }
  for (size_t j = 0; j < std::min(layout.num_buckets(), num_buckets); ++j) {
    const size_t n = layout.bucket(j).numel;
    if (before) {
      for (size_t r = 0; r < reducers.size(); ++r) reducers[r]->prepare_bucket(j, bufs[r]);
      before(j, bufs, n);
      collective::allreduce_sum(algorithm, bufs, n, pool);
      for (size_t r = 0; r < reducers.size(); ++r) reducers[r]->finalize_bucket(j, bufs[r]);
      continue;
    }
    // Block by block, each block prepared, all-reduced and finalized in a small buffer per thread that
    // stays in cache: every step is element-wise (collective::Span), so the bits are those of
    // whole-bucket calls, and the blocks can go to different threads.
    const size_t N = reducers.size(), block = std::max<size_t>(1024, (size_t{1} << 18) / N);  // ~1 MiB
    const size_t blocks = (n + block - 1) / block;
    parallel_for(pool, blocks, static_cast<double>(block * N), [&](size_t k) {
      thread_local std::vector<float> scratch;
      scratch.resize(std::max(scratch.size(), N * block));
      std::vector<float*> slices(N);
      for (size_t r = 0; r < N; ++r) slices[r] = scratch.data() + r * block;
      const collective::Span span{k * block, std::min(n, (k + 1) * block)};
      for (size_t r = 0; r < N; ++r) reducers[r]->prepare_bucket(j, slices[r], span);
      collective::allreduce_sum(algorithm, slices, n, span);
      for (size_t r = 0; r < N; ++r) reducers[r]->finalize_bucket(j, slices[r], span);
    });
  }
}

void init_ddp(const Config& cfg, Replica& rep, const std::function<void(Replica&)>& broadcast) {
  if (cfg.broadcast) broadcast(rep);
  rep.reducer = std::make_unique<Reducer>(rep.model.parameters(), cfg.world_size, cfg.bucket_cap_mb, cfg.average);
  if (auto hook = make_comm_hook(cfg.comm_hook)) {
    rep.reducer->register_comm_hook(cfg.compare_hook ? compared_to_builtin(std::move(hook)) : std::move(hook));
  }
  // The training script's torch.manual_seed(seed + rank) after DDP(model): only later draws (the loader's,
  // Dropout's) see it.
  if (cfg.seed_per_rank) rep.gen.manual_seed(cfg.seed + static_cast<uint64_t>(rep.rank));
}

TrainLog run_epochs(const Config& cfg, const Dataset& data, const std::vector<Replica*>& local, Replica* single,
                    const SyncFn& sync, const BufferSyncFn& sync_buffers, ThreadPool* pool, bool progress,
                    const StepFn& after_step, const OutOfBatchesFn& out_of_batches) {
  TrainLog out;
  auto& sampler_indices = out.sampler_indices;
  // What one item of parallel work costs, for parallel_for: a replica's forward and backward (~6 flops per
  // parameter and sample), and its optimizer step (a few per parameter).
  const Footprint fp = footprint(cfg);
  const double step_work = 6.0 * static_cast<double>(fp.parameters * cfg.batch_size);
  const double update_work = 4.0 * static_cast<double>(fp.parameters);
  const bool has_buffers = !local[0]->model.buffers().empty();  // DDP syncs none when the model has none
  Progress shown("batch", progress ? cfg.epochs * cfg.batches_per_epoch() : 0);
  int64_t done = 0;
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    std::vector<std::vector<std::vector<int64_t>>> batches;
    sampler_indices.emplace_back();
    for (Replica* rep : local) {
      if (cfg.set_epoch) rep->sampler.set_epoch(epoch);
      sampler_indices.back().push_back(rep->sampler.indices());
      batches.push_back(rep->loader.iter());
    }
    const size_t nb = batches[0].size();  // DistributedSampler gives every rank as many samples
    for (size_t b = 0; b < nb; ++b) {
      // --uneven: the local replicas that still have batch b, and how many ranks in all.
      const auto bi = static_cast<int64_t>(b);
      const int64_t active = active_ranks(cfg, bi);
      std::vector<size_t> running;  // indexes into local; then the single device
      for (size_t k = 0; k < local.size(); ++k) {
        if (bi < rank_batches(cfg, local[k]->rank)) running.push_back(k);
      }
      if (active < cfg.world_size && !cfg.join) {  // PyTorch's ranks would block in the next all-reduce
        const std::string line = no_join_line(cfg, epoch, bi, *local[0]->reducer);
        if (running.empty() && out_of_batches) out_of_batches(line);
        if (running.size() == local.size()) {  // a real rank that has the batch: its all-reduce fails
          try {
            for (size_t k : running) local[k]->forward_backward(data, batches[k][b]);
            std::vector<Reducer*> reducers;
            for (Replica* rep : local) reducers.push_back(rep->reducer.get());
            sync(reducers);
          } catch (const std::exception& e) {
            throw RunError(line + "; here: " + e.what());
          }
        }
        throw RunError(line);
      }
      if (single) running.push_back(local.size());
      const auto rep_of = [&](size_t k) { return k < local.size() ? local[k] : single; };
      std::vector<int64_t> union_idx;
      for (size_t k : running) {
        if (k < local.size()) union_idx.insert(union_idx.end(), batches[k][b].begin(), batches[k][b].end());
      }
      if (has_buffers && syncs_buffers_before(cfg, b, nb)) sync_buffers(local, buffer_source(cfg, bi), false);
      std::vector<float> losses(running.size());
      parallel_for(pool, running.size(), step_work, [&](size_t i) {
        const size_t k = running[i];
        losses[i] = rep_of(k)->forward_backward(data, k < local.size() ? batches[k][b] : union_idx);
      });
      for (size_t i = 0; i < running.size(); ++i) {
        const size_t k = running[i];
        if (k < local.size()) {
          out.log.push_back({epoch, local[k]->rank, static_cast<int64_t>(batches[k][b].size()), losses[i]});
        }
      }
      if (single) out.single_losses.push_back(losses.back());
      shown.advance(++done);
      if (!is_sync_batch(cfg, b, nb)) continue;
      // The synchronised backward: every bucket all-reduced in order, then one optimizer step per rank that
      // had the batch (a joined rank's all-reduces are zeros, and it does not step).
      std::vector<Reducer*> reducers;
      for (Replica* rep : local) {
        const bool joined = bi >= rank_batches(cfg, rep->rank);
        rep->reducer->set_join_state(joined, cfg.join_divide_active ? active : cfg.world_size);
        reducers.push_back(rep->reducer.get());
      }
      sync(reducers);
      parallel_for(pool, running.size(), update_work, [&](size_t i) {
        const size_t k = running[i];
        if (k < local.size()) local[k]->reducer->finish_sync(local[k]->ready);
        rep_of(k)->optimizer->step();
        rep_of(k)->optimizer->zero_grad(true);
      });
      if (after_step) after_step(local);
      ++out.optimizer_steps;
    }
    if (cfg.join) {  // Join's post_hook: the last joiner's parameters and buffers to everyone
      for (Replica* rep : local) rep->reducer->set_join_state(false, cfg.world_size);
      sync_buffers(local, authoritative_rank(cfg), true);
    }
  }
  return out;
}

RankResult train_rank(const Config& cfg, comm::Communicator& comm) {
  return train_rank(cfg, comm, cpu_kernels(cfg.kernels));
}

RankResult train_rank(const Config& cfg, comm::Communicator& comm, const LinearKernels& kernels) {
  RankResult res;
  Generator data_gen;
  Dataset test;
  const Dataset data = make_dataset(cfg, data_gen, &test);
  res.replica = std::make_unique<Replica>(cfg, comm.rank());
  Replica& rep = *res.replica;
  rep.model.set_kernels(kernels);
  // DDP's buffer broadcast: rank 0's bits to everyone (num_batches_tracked's int64 travels as its 8 bytes);
  // under Join from the highest active rank.
  const auto broadcast_buffers = [&](Replica& r, int root = 0) {
    for (Buffer* b : r.model.buffers()) {
      if (b->is_int64) {
        comm.broadcast(reinterpret_cast<float*>(&b->count), sizeof b->count / sizeof(float), root);
      } else {
        comm.broadcast(b->value.data(), static_cast<size_t>(b->value.size()), root);
      }
    }
  };
  init_ddp(cfg, rep, [&](Replica& r) {  // DDP's constructor: rank 0's parameters, then buffers, to everyone
    for (Parameter* p : r.model.parameters()) comm.broadcast(p->data(), static_cast<size_t>(p->numel()), 0);
    broadcast_buffers(r);
  });
  rep.reducer->set_backend_averages(cfg.average == Average::avg && comm.native_avg());
  HostSyncOps ops(rep.model.parameters(), comm);
  const BufferSyncFn sync_state = [&](const std::vector<Replica*>& local, int64_t src, bool with_params) {
    const int root = static_cast<int>(src);
    if (with_params) {  // Join's final model: parameters, then buffers (_sync_module_states)
      for (Parameter* p : local[0]->model.parameters())
        comm.broadcast(p->data(), static_cast<size_t>(p->numel()), root);
    }
    broadcast_buffers(*local[0], root);
  };
  // --uneven without --join, on the rank that ran out: it stays alive and silent, as a rank of a script whose
  // loop ended would at its next collective; the others' all-reduce fails after the timeout.
  const OutOfBatchesFn out_of_batches = [&](const std::string& line) {
    // The others' timeout, their blame window (at most 1.5 s) and a margin: they fail and say so first.
    const auto wait = comm.timeout + std::chrono::seconds(3);
    std::this_thread::sleep_for(wait);
    throw RunError(
        fmt::format("{}; here: rank {} waited {} ms instead of joining it", line, comm.rank(), wait.count()));
  };
  StepFn after_step;
  if (cfg.zero) {  // ZeroRedundancyOptimizer._sync_params: each parameter from its owner, over the communicator
    after_step = [&](const std::vector<Replica*>&) {
      const auto& zero = dynamic_cast<const ZeroRedundancyOptimizer&>(*rep.optimizer);
      zero_sync_params(zero.partition(), [&](size_t i, int64_t owner) {
        Parameter& p = *zero.params()[i];
        comm.broadcast(p.data(), static_cast<size_t>(p.numel()), static_cast<int>(owner));
      });
    };
  }
  const SyncFn sync = [&](const std::vector<Reducer*>& reducers) {
    if (reducers[0]->joined()) {
      // A joined rank (Join's _match_all_reduce_for_bwd_pass): one all-reduce of zeros per bucket of the
      // current layout, in bucket order.
      std::vector<float> zeros;
      for (size_t j = 0; j < reducers[0]->num_buckets(); ++j) {
        zeros.assign(reducers[0]->bucket(j).numel, 0.0f);
        comm.all_reduce(zeros.data(), zeros.size(), comm::ReduceOp::sum);
      }
      return;
    }
    std::vector<HookReport> reports = sync_buckets(*reducers[0], ops);
    if (rep.reducer->comm_hook()) res.hook_reports.push_back(std::move(reports));
  };
  const auto t0 = std::chrono::steady_clock::now();
  TrainLog trained =
      run_epochs(cfg, data, {&rep}, nullptr, sync, sync_state, nullptr, comm.rank() == 0, after_step, out_of_batches);
  res.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.log = std::move(trained.log);
  res.optimizer_steps = trained.optimizer_steps;
  for (auto& e : trained.sampler_indices) res.sampler_indices.push_back(e[0]);
  if (test.size() > 0) {  // DDP(model).eval() forward: the buffers are rank 0's again first
    if (cfg.broadcast_buffers && !rep.model.buffers().empty())
      broadcast_buffers(rep, cfg.join ? comm.world_size() - 1 : 0);
    res.test_correct = test_correct(cfg, rep.model, test);
  }
  return res;
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
  // DDP(model): broadcast rank 0's parameters, then build the reducer.
  for (auto& rep : res.replicas) {
    init_ddp(cfg, *rep, [&](Replica& r) {
      if (r.rank == 0) return;
      copy_parameters(res.replicas[0]->model, r.model);
      copy_buffers(res.replicas[0]->model, r.model);
    });
  }
  // The single device takes the ranks' batches concatenated; its own sampler and loader go unused.
  if (single_device && cfg.seed_per_rank) res.single_device->gen.manual_seed(cfg.seed);  // as rank 0
  // The single device is one model with the plain optimizer, whatever the ranks shard.
  if (single_device && cfg.zero) res.single_device->optimizer = make_optimizer(cfg, res.single_device->model);
  res.buckets_first = res.replicas[0]->reducer->describe();

  int64_t sync_count = 0;
  InProcessAllreduce allreduce;
  std::vector<Replica*> local;
  for (auto& rep : res.replicas) local.push_back(rep.get());
  // Only a hook needs whole prepared buckets (world_size x the largest bucket); without one every bucket
  // goes block by block through a small buffer per thread, the path //bench:sim_step measures.
  InProcessAllreduce::Hook before;
  if (hooks.before_allreduce) {
    before = [&](size_t bucket, const std::vector<float*>& bufs, size_t n) {
      hooks.before_allreduce(sync_count, bucket, bufs, n);
    };
  }
  // A comm hook runs per rank, each on its own thread (hooked_sync.h).
  std::unique_ptr<HookedAllreduce> hooked;
  if (cfg.comm_hook.name != "none") {
    hooked = std::make_unique<HookedAllreduce>(static_cast<int>(cfg.world_size), cfg.allreduce);
  }
  const SyncFn sync = [&](const std::vector<Reducer*>& reducers) {
    if (hooked) {
      res.hook_reports.push_back(hooked->run(reducers));
    } else {
      allreduce.run(reducers, cfg.allreduce, before, &pool);
    }
    ++sync_count;
  };
  const BufferSyncFn sync_buffers = [](const std::vector<Replica*>& ranks, int64_t src, bool with_params) {
    const Replica& from = *ranks[static_cast<size_t>(src)];
    for (Replica* to : ranks) {
      if (to == &from) continue;
      if (with_params) copy_parameters(from.model, to->model);
      copy_buffers(from.model, to->model);
    }
  };
  StepFn after_step;
  if (cfg.zero) {  // ZeroRedundancyOptimizer._sync_params: each rank takes each parameter's bits from its owner
    after_step = [](const std::vector<Replica*>& ranks) {
      const auto& zero = dynamic_cast<const ZeroRedundancyOptimizer&>(*ranks[0]->optimizer);
      zero_sync_params(zero.partition(), [&](size_t i, int64_t owner) {
        const Parameter& src = *ranks[static_cast<size_t>(owner)]->model.parameters()[i];
        for (Replica* r : ranks) {
          if (r->rank != owner) r->model.parameters()[i]->value = src.value;
        }
      });
    };
  }
  TrainLog trained = run_epochs(cfg, data, local, res.single_device.get(), sync, sync_buffers, &pool, true, after_step);
  res.sampler_indices = std::move(trained.sampler_indices);
  res.log = std::move(trained.log);
  res.optimizer_steps = trained.optimizer_steps;
  res.single_device_losses = std::move(trained.single_losses);
  res.buckets_rebuilt = res.replicas[0]->reducer->describe();
  if (test.size() > 0) {
    // DDP(model).eval() forward broadcasts first (under Join from the highest rank: all are active)
    if (cfg.broadcast_buffers) sync_buffers(local, cfg.join ? cfg.world_size - 1 : 0, false);
    res.test_size = test.size();
    for (Replica* rep : local) res.test_correct.push_back(test_correct(cfg, rep->model, test));
    if (res.single_device) res.single_device_test_correct = test_correct(cfg, res.single_device->model, test);
  }
  return res;
}

std::string progress_line(const BatchLog& l, int64_t epochs) {
  return fmt::format("[rank{}] Epoch: {:03d}/{:03d} | Batch size {:03d} | Loss: {:.2f}", l.rank, l.epoch + 1, epochs,
                     l.batch_size, l.loss);
}

}  // namespace ddplab::ddp
