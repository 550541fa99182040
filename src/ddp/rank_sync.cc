#include "src/ddp/rank_sync.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "src/ddp/bucket_sync.h"
#include "src/ddp/zero.h"
#include "src/base/errors.h"

namespace ddplab::ddp {

void broadcast_buffers(comm::Communicator& comm, TrainingRank& rank, int root) {
  for (Buffer* b : rank.buffers()) {
    if (b->is_int64) {
      comm.broadcast(reinterpret_cast<float*>(&b->count), sizeof b->count / sizeof(float), root);
    } else {
      comm.broadcast(b->value.data(), static_cast<size_t>(b->value.size()), root);
    }
  }
}

void broadcast_model(comm::Communicator& comm, TrainingRank& rank) {
  comm.context = "DDP(model): the broadcast of rank 0's parameters and buffers";
  for (Parameter* p : rank.parameters()) comm.broadcast(p->data(), static_cast<size_t>(p->numel()), 0);
  broadcast_buffers(comm, rank, 0);
}

std::string CommunicatorSync::where() const {
  return cfg_.no_sync > 1 ? fmt::format("step {}, micro-batch {}: ", step_, micro_) : fmt::format("step {}: ", step_);
}

LoopSync CommunicatorSync::sync(bool progress) {
  LoopSync s;
  s.progress = progress;
  s.at = [this](int64_t step, int64_t micro) {
    step_ = step;
    micro_ = micro;
  };
  s.allreduce = [this](const std::vector<Reducer*>& reducers, size_t n) -> std::vector<HookReport> {
    Reducer& red = *reducers[0];
    buf_.resize(std::max(buf_.size(), red.max_bucket_numel()));
    // With a hook, every rank runs it (a joined one on zero buckets: prepare_bucket gives zeros); without, a
    // joined rank's Reducer gives zeros too (Join's _match_all_reduce_for_bwd_pass) and keeps its grads.
    if (red.comm_hook()) {
      comm_.context = where();
      return hook_buckets(red, comm_, buf_.data(), n);
    }
    const comm::ReduceOp op = red.backend_averages() ? comm::ReduceOp::avg : comm::ReduceOp::sum;
    for (size_t j = 0; j < std::min(n, red.num_buckets()); ++j) {
      red.prepare_bucket(j, buf_.data());
      comm_.context = fmt::format("{}bucket {}'s all-reduce", where(), j);
      comm_.all_reduce(buf_.data(), red.bucket(j).numel, op);
      red.finalize_bucket(j, buf_.data());
    }
    return {};
  };
  s.global_unused = [this](const std::vector<std::vector<bool>>& local) {  // the local_used_map, all-reduced
    std::vector<float> used(local[0].size());
    for (size_t i = 0; i < used.size(); ++i) used[i] = local[0][i] ? 0.0f : 1.0f;
    comm_.context = where() + "find_unused_parameters' all-reduce of the used-parameter map";
    comm_.all_reduce(used.data(), used.size(), comm::ReduceOp::sum);
    std::vector<bool> g(used.size());
    for (size_t i = 0; i < used.size(); ++i) g[i] = used[i] == 0.0f;
    return g;
  };
  s.sync_state = [this](const std::vector<TrainingRank*>& local, int64_t src, bool with_params) {
    const int root = static_cast<int>(src);
    comm_.context = with_params ? fmt::format("Join's final broadcast of rank {}'s parameters and buffers", root)
                                : fmt::format("{}the buffer broadcast from rank {} before the forward", where(), root);
    if (with_params) {  // Join's final model: parameters, then buffers (_sync_module_states)
      for (Parameter* p : local[0]->parameters()) comm_.broadcast(p->data(), static_cast<size_t>(p->numel()), root);
    }
    broadcast_buffers(comm_, *local[0], root);
  };
  // --uneven without --join, on the rank that ran out: it stays alive and silent, as a rank of a script whose
  // loop ended would at its next collective; the others' all-reduce fails after the timeout.
  s.out_of_batches = [this](const std::string& line) {
    // The others' timeout, their blame window (at most 1.5 s) and a margin: they fail and say so first.
    const auto wait = comm_.timeout + std::chrono::seconds(3);
    std::this_thread::sleep_for(wait);
    throw RunError(
        fmt::format("{}; here: rank {} waited {} ms instead of joining it", line, comm_.rank(), wait.count()));
  };
  if (cfg_.zero) {  // ZeroRedundancyOptimizer._sync_params: each parameter from its owner, over the communicator
    s.after_step = [this](const std::vector<TrainingRank*>& local) {
      const auto& zero = dynamic_cast<const ZeroRedundancyOptimizer&>(*local[0]->optimizer);
      zero_sync_params(zero.partition(), [&](size_t i, int64_t owner) {
        Parameter& p = *zero.params()[i];
        comm_.context = fmt::format("{}ZeroRedundancyOptimizer's broadcast of {} from rank {}", where(), p.name, owner);
        comm_.broadcast(p.data(), static_cast<size_t>(p.numel()), static_cast<int>(owner));
      });
    };
  }
  return s;
}

}  // namespace ddplab::ddp
