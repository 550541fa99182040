#include "src/device/replica.h"

#include <chrono>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "src/ddp/bucket_sync.h"
#include "src/ddp/loop.h"
#include "src/device/graph.h"
#include "src/device/optimizer.h"
#include "src/base/errors.h"
#include "src/model/spec.h"

namespace ddplab::device {

std::string unsupported_layer(const ddp::Config& cfg) {
  Generator gen;  // nothing is drawn: the layers only, zero parameters
  return missing_node(
      build_model(plan_model(cfg.model_spec(), cfg.sample_shape()), cfg.is_mlp() ? "layers" : "", gen, false));
}

namespace {

int64_t sample_width(const ddp::Config& cfg) {
  int64_t w = 1;
  for (int64_t d : cfg.sample_shape()) w *= d;
  return w;
}

// The bucket loop's tensors in the Ops' memory: .grad in the graph's flat gradient array, one bucket buffer
// sized for the largest bucket, the collectives through the Ops (host or device memory).
class GraphSyncOps : public ddp::SyncOps {
 public:
  GraphSyncOps(Ops& ops, comm::Communicator& comm, Graph& graph, float* bucket)
      : ops_(ops), comm_(comm), graph_(graph), bucket_(bucket) {}
  float* grad(size_t param) override { return graph_.g() + graph_.offsets()[param]; }
  float* bucket(size_t) override { return bucket_; }
  void scale_copy(float* dst, const float* src, size_t n, float scale) override { ops_.scale_copy(dst, src, n, scale); }
  void copy(float* dst, const float* src, size_t n) override { ops_.copy(dst, src, n); }
  void divide(float* a, size_t n, float d) override { ops_.divide(a, n, d); }
  void all_reduce(float* a, size_t n, comm::ReduceOp op) override { ops_.all_reduce(comm_, a, n, op); }

 private:
  Ops& ops_;
  comm::Communicator& comm_;
  Graph& graph_;
  float* bucket_;
};

}  // namespace

struct GraphReplica::Impl {
  const ddp::Config& cfg;
  comm::Communicator& comm;
  Ops& ops;
  std::unique_ptr<Graph> graph;
  int64_t in = 0, out = 0, max_batch = 0, max_batches = 0, batches = 0;
  std::unique_ptr<ddp::Reducer> reducer;  // bucket layout only
  std::vector<Parameter*> ready;          // the last backward's gradient-ready order
  OptimizerState opt;
  float *bucket = nullptr, *x = nullptr, *target = nullptr, *losses = nullptr;
  float *host_params = nullptr, *host_losses = nullptr, *host_batch[2] = {nullptr, nullptr};
  Ops::Event uploaded[2] = {nullptr, nullptr};
  bool slot_used[2] = {false, false};
  int slot = 0;

  Impl(const ddp::Config& c, comm::Communicator& cm, Ops& o) : cfg(c), comm(cm), ops(o) {}
  void upload_batch(const Dataset& data, const std::vector<int64_t>& idx);
};

GraphReplica::GraphReplica(const ddp::Config& cfg, comm::Communicator& comm, Kernels kernels, ddp::Replica& host,
                           Ops& ops, int64_t max_batches)
    : impl_(std::make_unique<Impl>(cfg, comm, ops)) {
  if (cfg.loss != ddp::LossKind::mse) {
    throw UsageError("the device graph computes --loss mse only (got " + ddp::loss_name(cfg.loss) + ")");
  }
  Impl& m = *impl_;
  m.in = sample_width(cfg);
  m.max_batch = cfg.batch_size;
  m.max_batches = max_batches >= 0 ? max_batches : cfg.epochs * host.loader.len();
  m.graph = std::make_unique<Graph>(host.model, ops, kernels, m.in, m.max_batch, cfg.no_sync > 1);
  Graph& g = *m.graph;
  m.out = g.out_width();
  const size_t total = g.total();
  const auto B = static_cast<size_t>(m.max_batch);

  m.bucket = ops.alloc(total);  // iteration 0's single bucket holds every parameter: the largest one
  if (cfg.optimizer == ddp::OptimizerKind::adam) {
    m.opt.exp_avg = ops.alloc(total);
    m.opt.exp_avg_sq = ops.alloc(total);
    ops.zero(m.opt.exp_avg, total);  // torch.zeros_like at step 1
    ops.zero(m.opt.exp_avg_sq, total);
  } else if (cfg.momentum != 0.0) {
    m.opt.momentum = ops.alloc(total);
  }
  m.x = ops.alloc(B * static_cast<size_t>(m.in));
  m.target = ops.alloc(B * static_cast<size_t>(m.out));
  m.losses = ops.alloc(static_cast<size_t>(m.max_batches));
  m.host_losses = ops.alloc_host(static_cast<size_t>(m.max_batches));
  m.host_params = ops.alloc_host(total);
  for (float*& buf : m.host_batch) buf = ops.alloc_host(B * static_cast<size_t>(m.in + m.out));
  for (Ops::Event& e : m.uploaded) e = ops.event();

  // make_model's weights, uploaded once; the host copy is not touched again until the final download.
  const auto& params = g.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    std::memcpy(m.host_params + g.offsets()[i], params[i]->data(), params[i]->numel() * sizeof(float));
  }
  ops.upload(g.p(), m.host_params, total);
  if (cfg.broadcast) {  // DDP's constructor: rank 0's parameters to everyone, one tensor at a time
    try {
      for (size_t i = 0; i < params.size(); ++i) {
        ops.broadcast(comm, g.p() + g.offsets()[i], static_cast<size_t>(params[i]->numel()), 0);
      }
    } catch (...) {
      ops.keep_memory();
      throw;
    }
  }
  m.reducer = std::make_unique<ddp::Reducer>(params, cfg.world_size, cfg.bucket_cap_mb, cfg.average);
  m.reducer->set_backend_averages(cfg.average == ddp::Average::avg && comm.native_avg());
  if (cfg.hand_sync != ddp::HandSync::none) m.reducer->set_layout(ddp::hand_sync_layout(cfg, params), true);
}

GraphReplica::~GraphReplica() = default;

// The batch's rows of x and y (what gather_x/gather_y stack), through one of two host buffers. Before
// refilling a buffer the host waits for its previous copy: an event recorded after that copy, so it never
// waits on a collective (every one enqueued before it has already finished).
void GraphReplica::Impl::upload_batch(const Dataset& data, const std::vector<int64_t>& idx) {
  slot ^= 1;
  if (slot_used[slot]) ops.sync(uploaded[slot]);
  const auto n_in = static_cast<size_t>(in), n_out = static_cast<size_t>(out), B = idx.size();
  float* hx = host_batch[slot];
  float* hy = hx + B * n_in;
  for (size_t r = 0; r < B; ++r) {
    std::memcpy(hx + r * n_in, data.x.row(idx[r]).data(), n_in * sizeof(float));
    std::memcpy(hy + r * n_out, data.y.row(idx[r]).data(), n_out * sizeof(float));
  }
  ops.upload(x, hx, B * n_in);
  ops.upload(target, hy, B * n_out);
  ops.record(uploaded[slot]);
  slot_used[slot] = true;
}

void GraphReplica::forward_backward(const Dataset& data, const std::vector<int64_t>& idx) {
  Impl& m = *impl_;
  const auto B = static_cast<int64_t>(idx.size());
  if (B == 0 || B > m.max_batch || m.batches >= m.max_batches) {
    throw std::logic_error(fmt::format("GraphReplica: batch of {} (at most {}), batch #{} (room for {})", B,
                                       m.max_batch, m.batches, m.max_batches));
  }
  if (data.x.cols() != m.in || data.y.cols() != m.out) {
    throw std::logic_error(fmt::format("GraphReplica: data of {} -> {} values per sample, the model takes {} -> {}",
                                       data.x.cols(), data.y.cols(), m.in, m.out));
  }
  m.upload_batch(data, idx);
  const float* y = m.graph->forward(m.x, B);
  // mse_loss: the gradient is (out - y) * float(2.0 / n), as src/train/loss.cc computes it.
  const auto n = static_cast<size_t>(B * m.out);
  m.ops.mse(y, m.target, m.graph->grad_buffer(), m.losses + m.batches, n,
            static_cast<float>(2.0 / static_cast<double>(n)));
  ++m.batches;
  m.ready.clear();
  m.graph->backward(B, m.ready);
}

void GraphReplica::sync_and_step() {
  Impl& m = *impl_;
  Graph& g = *m.graph;
  if (!g.has_grad()) throw std::logic_error("GraphReplica::sync_and_step before any forward_backward");
  // The host trainer's bucket loop (bucket_sync.h) over the Ops' memory; the layout is the host Reducer's.
  GraphSyncOps ops(m.ops, m.comm, g, m.bucket);
  try {
    ddp::sync_buckets(*m.reducer, ops);
  } catch (...) {
    m.ops.keep_memory();
    throw;
  }
  m.reducer->finish_sync(m.ready);
  optimizer_step(m.cfg, m.ops, g.p(), g.g(), g.total(), m.opt);
  g.zero_grad();
}

void GraphReplica::wait() { impl_->ops.wait(); }

std::vector<float> GraphReplica::download_losses() {
  Impl& m = *impl_;
  const auto n = static_cast<size_t>(m.batches);
  if (n > 0) m.ops.download(m.host_losses, m.losses, n);
  wait();
  return std::vector<float>(m.host_losses, m.host_losses + n);
}

void GraphReplica::download_parameters() {
  Impl& m = *impl_;
  Graph& g = *m.graph;
  m.ops.download(m.host_params, g.p(), g.total());
  wait();
  const auto& params = g.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    std::memcpy(params[i]->data(), m.host_params + g.offsets()[i], params[i]->numel() * sizeof(float));
  }
}

std::vector<float> GraphReplica::download_gradients() {
  Impl& m = *impl_;
  Graph& g = *m.graph;
  float* staging = m.host_params;  // free between the upload and the final download of the parameters
  m.ops.download(staging, g.g(), g.total());
  wait();
  return std::vector<float>(staging, staging + g.total());
}

ddp::RankResult train_rank_on_ops(const ddp::Config& cfg, comm::Communicator& comm, Kernels kernels, Ops& ops,
                                  std::vector<float>* final_grads) {
  ddp::RankResult res;
  Generator data_gen;
  const Dataset data = ddp::make_dataset(cfg, data_gen);
  res.replica = std::make_unique<ddp::Replica>(cfg, comm.rank());
  ddp::Replica& rep = *res.replica;
  GraphReplica device(cfg, comm, kernels, rep, ops);
  // run_epochs for one local replica, the per-batch loss read back at the end.
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    if (cfg.set_epoch) rep.sampler.set_epoch(epoch);
    res.sampler_indices.push_back(rep.sampler.indices());
    const auto batches = rep.loader.iter();
    for (size_t b = 0; b < batches.size(); ++b) {
      device.forward_backward(data, batches[b]);
      res.log.push_back({epoch, rep.rank, static_cast<int64_t>(batches[b].size()), 0.0f});
      if (!ddp::is_step_batch(cfg, b, batches.size())) continue;  // --sync-on last only (gpu_trainer.h)
      device.sync_and_step();
      ++res.optimizer_steps;
    }
  }
  device.wait();  // the last epoch ended with a synchronised batch: no collective is pending
  res.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<float> losses = device.download_losses();
  for (size_t i = 0; i < res.log.size(); ++i) res.log[i].loss = losses[i];
  if (final_grads) *final_grads = device.download_gradients();
  device.download_parameters();
  return res;
}

}  // namespace ddplab::device
