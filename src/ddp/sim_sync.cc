#include "src/ddp/sim_sync.h"

#include <algorithm>

#include "src/ddp/zero.h"

namespace ddplab::ddp {

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
    const collective::MeasuredOrder* order = measured ? measured(n) : nullptr;
    if (before) {
      for (size_t r = 0; r < reducers.size(); ++r) reducers[r]->prepare_bucket(j, bufs[r]);
      before(j, bufs, n);
      if (order) {
        collective::chain_allreduce(*order, bufs, pool);
      } else {
        collective::allreduce_sum(algorithm, bufs, n, pool);
      }
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
      if (order) {
        collective::chain_allreduce(*order, slices, span);
      } else {
        collective::allreduce_sum(algorithm, slices, n, span);
      }
      for (size_t r = 0; r < N; ++r) reducers[r]->finalize_bucket(j, slices[r], span);
    });
  }
}

void copy_parameters(const std::vector<TrainingRank*>& ranks, const TrainingRank& from) {
  const auto src = const_cast<TrainingRank&>(from).parameters();
  for (TrainingRank* to : ranks) {
    if (to == &from) continue;
    const auto dst = to->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i]->value = src[i]->value;
  }
}

void copy_buffers(const std::vector<TrainingRank*>& ranks, const TrainingRank& from) {
  const auto src = const_cast<TrainingRank&>(from).buffers();
  for (TrainingRank* to : ranks) {
    if (to == &from) continue;
    const auto dst = to->buffers();
    for (size_t i = 0; i < src.size(); ++i) {
      dst[i]->value = src[i]->value;
      dst[i]->count = src[i]->count;
    }
  }
}

InProcessSync::InProcessSync(const Config& cfg, ThreadPool* pool, Before before)
    : cfg_(cfg), pool_(pool), before_(std::move(before)) {
  if (cfg.comm_hook.name != "none") {
    hooked_ = std::make_unique<HookedAllreduce>(static_cast<int>(cfg.world_size), cfg.allreduce);
  }
}

LoopSync InProcessSync::sync(bool progress) {
  LoopSync s;
  s.pool = pool_;
  s.progress = progress;
  s.allreduce = [this](const std::vector<Reducer*>& reducers, size_t n) -> std::vector<HookReport> {
    std::vector<HookReport> reports;
    if (hooked_) {
      reports = hooked_->run(reducers, n);
    } else {
      InProcessAllreduce::Hook before;
      if (before_) {
        before = [this](size_t bucket, const std::vector<float*>& bufs, size_t numel) {
          before_(syncs_, bucket, bufs, numel);
        };
      }
      allreduce_.run(reducers, cfg_.allreduce, before, pool_, n);
    }
    ++syncs_;
    return reports;
  };
  s.global_unused = [](const std::vector<std::vector<bool>>& local) {  // the all-reduced local_used_map
    std::vector<bool> g(local[0].size(), true);
    for (const auto& u : local) {
      for (size_t i = 0; i < u.size(); ++i) g[i] = g[i] && u[i];
    }
    return g;
  };
  s.sync_state = [](const std::vector<TrainingRank*>& ranks, int64_t src, bool with_params) {
    const TrainingRank& from = *ranks[static_cast<size_t>(src)];
    if (with_params) copy_parameters(ranks, from);
    copy_buffers(ranks, from);
  };
  if (cfg_.zero) {  // ZeroRedundancyOptimizer._sync_params: each rank takes each parameter's bits from its owner
    s.after_step = [](const std::vector<TrainingRank*>& ranks) {
      const auto& zero = dynamic_cast<const ZeroRedundancyOptimizer&>(*ranks[0]->optimizer);
      zero_sync_params(zero.partition(), [&](size_t i, int64_t owner) {
        const Parameter& src = *ranks[static_cast<size_t>(owner)]->parameters()[i];
        for (TrainingRank* r : ranks) {
          if (r->rank != owner) r->parameters()[i]->value = src.value;
        }
      });
    };
  }
  return s;
}

}  // namespace ddplab::ddp
