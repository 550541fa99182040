// The device-resident trainer's host side: memory, uploads, and the loop of train_rank() with every tensor
// operation enqueued on the communicator's stream (Linear: src/cuda_kernels.h; the optimizer step:
// src/nccl/gpu_optimizer.h; the rest: src/nccl/gpu_trainer_ops.h).
#include "src/nccl/gpu_trainer.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <stdexcept>

#include <fmt/format.h>

#include "src/cuda_kernels.h"
#include "src/ddp/bucket_sync.h"
#include "src/nccl/gpu_optimizer.h"
#include "src/nccl/gpu_trainer_ops.h"

namespace ddplab::dist {
namespace {

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", call, cudaGetErrorString(e)));
}
#define CUDA(call) check((call), #call)

// Every allocation of a replica, made before training. Freed at the end unless a failure is unwinding:
// cudaFree synchronises with the device, and a failed collective may have left a kernel behind (the
// NCCL communicator frees nothing after an abort either; the process is about to exit).
class Memory {
 public:
  float* device(size_t n) {
    void* p = nullptr;
    CUDA(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float)));
    device_.push_back(p);
    return static_cast<float*>(p);
  }
  float* pinned(size_t n) {
    void* p = nullptr;
    CUDA(cudaMallocHost(&p, std::max<size_t>(n, 1) * sizeof(float)));
    pinned_.push_back(p);
    return static_cast<float*>(p);
  }
  cudaEvent_t event() {
    cudaEvent_t e = nullptr;
    CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events_.push_back(e);
    return e;
  }
  bool keep = false;  // set after a failure
  ~Memory() {
    if (keep || std::uncaught_exceptions() > 0) return;
    for (void* p : device_) cudaFree(p);
    for (void* p : pinned_) cudaFreeHost(p);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

 private:
  std::vector<void*> device_, pinned_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

struct DeviceReplica::Impl {
  const ddp::Config& cfg;
  comm::Communicator& comm;
  Kernels kernels;
  void* stream = nullptr;
  std::vector<Parameter*> params;  // host, model.parameters() order: W0, b0, W1, b1, ...
  std::vector<size_t> offset;      // of each parameter in the flat device arrays
  size_t total = 0;
  std::vector<int64_t> sizes;  // cfg.layers
  int64_t max_batch = 0, max_batches = 0, batches = 0;
  std::unique_ptr<ddp::Reducer> reducer;  // bucket layout only
  bool has_grad = false;                  // every parameter gets a gradient in every backward, so one flag serves all
  DeviceOptimizerState opt;
  Memory mem;  // declared before the pointers into it
  float *p = nullptr, *g = nullptr, *bucket = nullptr, *scratch = nullptr;
  float *target = nullptr, *losses = nullptr, *gy[2] = {nullptr, nullptr};
  std::vector<float*> act, pre;  // act[i]: input of Linear i (act[L]: output); pre[i]: before ReLU i
  float *pinned_params = nullptr, *pinned_losses = nullptr, *pinned_batch[2] = {nullptr, nullptr};
  cudaEvent_t uploaded[2] = {nullptr, nullptr};
  bool slot_used[2] = {false, false};
  int slot = 0;

  Impl(const ddp::Config& c, comm::Communicator& cm, Kernels k) : cfg(c), comm(cm), kernels(k) {}
  cudaStream_t s() const { return static_cast<cudaStream_t>(stream); }
  float* weight(float* base, size_t layer) const { return base + offset[2 * layer]; }
  float* bias(float* base, size_t layer) const { return base + offset[2 * layer + 1]; }

  void upload_batch(const Dataset& data, const std::vector<int64_t>& idx);
  void backward(float* grad_out, int64_t batch);
};

DeviceReplica::DeviceReplica(const ddp::Config& cfg, comm::Communicator& comm, Kernels kernels, ddp::Replica& host,
                             int64_t max_batches)
    : impl_(std::make_unique<Impl>(cfg, comm, kernels)) {
  if (std::string why = gpu_trainer_unsupported(cfg); !why.empty()) throw UsageError(why);
  Impl& m = *impl_;
  m.stream = comm.device_stream();
  if (!comm.device_resident() || !m.stream) {
    throw std::runtime_error("the device-resident trainer needs a device-resident communicator (NCCL), got " +
                             comm.backend());
  }
  m.params = host.model.parameters();
  size_t largest = 0;
  for (const Parameter* p : m.params) {
    m.offset.push_back(m.total);
    m.total += static_cast<size_t>(p->numel());
    largest = std::max(largest, static_cast<size_t>(p->numel()));
  }
  m.sizes = cfg.layers;
  const size_t L = m.sizes.size() - 1;
  m.max_batch = cfg.batch_size;
  m.max_batches = max_batches >= 0 ? max_batches : cfg.epochs * host.loader.len();
  const auto B = static_cast<size_t>(m.max_batch);
  int64_t widest = 0;
  for (int64_t w : m.sizes) widest = std::max(widest, w);

  m.p = m.mem.device(m.total);
  m.g = m.mem.device(m.total);
  m.bucket = m.mem.device(m.total);  // iteration 0's single bucket holds every parameter: the largest one
  if (cfg.no_sync > 1) m.scratch = m.mem.device(largest);  // a micro-batch's gradient before accumulation
  if (cfg.optimizer == ddp::OptimizerKind::adam) {
    m.opt.exp_avg = m.mem.device(m.total);
    m.opt.exp_avg_sq = m.mem.device(m.total);
    CUDA(cudaMemsetAsync(m.opt.exp_avg, 0, m.total * sizeof(float), m.s()));  // torch.zeros_like at step 1
    CUDA(cudaMemsetAsync(m.opt.exp_avg_sq, 0, m.total * sizeof(float), m.s()));
  } else if (cfg.momentum != 0.0) {
    m.opt.momentum = m.mem.device(m.total);
  }
  for (size_t i = 0; i <= L; ++i) m.act.push_back(m.mem.device(B * static_cast<size_t>(m.sizes[i])));
  if (cfg.relu) {
    for (size_t i = 0; i + 1 < L; ++i) m.pre.push_back(m.mem.device(B * static_cast<size_t>(m.sizes[i + 1])));
  }
  for (float*& buf : m.gy) buf = m.mem.device(B * static_cast<size_t>(widest));
  m.target = m.mem.device(B * static_cast<size_t>(m.sizes.back()));
  m.losses = m.mem.device(static_cast<size_t>(m.max_batches));
  m.pinned_losses = m.mem.pinned(static_cast<size_t>(m.max_batches));
  m.pinned_params = m.mem.pinned(m.total);
  for (float*& buf : m.pinned_batch) buf = m.mem.pinned(B * static_cast<size_t>(m.sizes.front() + m.sizes.back()));
  for (cudaEvent_t& e : m.uploaded) e = m.mem.event();

  // make_model's weights, uploaded once; the pinned copy is not touched again until the final download.
  for (size_t i = 0; i < m.params.size(); ++i) {
    std::memcpy(m.pinned_params + m.offset[i], m.params[i]->data(), m.params[i]->numel() * sizeof(float));
  }
  CUDA(cudaMemcpyAsync(m.p, m.pinned_params, m.total * sizeof(float), cudaMemcpyHostToDevice, m.s()));
  if (cfg.broadcast) {  // DDP's constructor: rank 0's parameters to everyone, one tensor at a time
    for (size_t i = 0; i < m.params.size(); ++i) {
      comm.broadcast_device(m.p + m.offset[i], static_cast<size_t>(m.params[i]->numel()), 0);
    }  // a failure unwinds through ~Memory, which then frees nothing
  }
  m.reducer = std::make_unique<ddp::Reducer>(m.params, cfg.world_size, cfg.bucket_cap_mb, cfg.average);
  m.reducer->set_backend_averages(cfg.average == ddp::Average::avg && comm.native_avg());
}

DeviceReplica::~DeviceReplica() = default;

// The batch's rows of x and y (what gather_x/gather_y stack), through one of two pinned buffers. Before
// refilling a buffer the host waits for its previous copy: an event recorded after that copy, so it never
// waits on a collective (every one enqueued before it has already finished).
void DeviceReplica::Impl::upload_batch(const Dataset& data, const std::vector<int64_t>& idx) {
  slot ^= 1;
  if (slot_used[slot]) CUDA(cudaEventSynchronize(uploaded[slot]));
  const auto in = static_cast<size_t>(sizes.front()), out = static_cast<size_t>(sizes.back()), B = idx.size();
  float* x = pinned_batch[slot];
  float* y = x + B * in;
  for (size_t r = 0; r < B; ++r) {
    std::memcpy(x + r * in, data.x.row(idx[r]).data(), in * sizeof(float));
    std::memcpy(y + r * out, data.y.row(idx[r]).data(), out * sizeof(float));
  }
  CUDA(cudaMemcpyAsync(act[0], x, B * in * sizeof(float), cudaMemcpyHostToDevice, s()));
  CUDA(cudaMemcpyAsync(target, y, B * out * sizeof(float), cudaMemcpyHostToDevice, s()));
  CUDA(cudaEventRecord(uploaded[slot], s()));
  slot_used[slot] = true;
}

void DeviceReplica::forward_backward(const Dataset& data, const std::vector<int64_t>& idx) {
  Impl& m = *impl_;
  const auto B = static_cast<int64_t>(idx.size());
  if (B == 0 || B > m.max_batch || m.batches >= m.max_batches) {
    throw std::logic_error(fmt::format("DeviceReplica: batch of {} (at most {}), batch #{} (room for {})", B,
                                       m.max_batch, m.batches, m.max_batches));
  }
  m.upload_batch(data, idx);
  // MLP::forward: Linear, then ReLU between layers (its pre-activation kept for backward).
  const size_t L = m.sizes.size() - 1;
  for (size_t i = 0; i < L; ++i) {
    const bool relu = m.cfg.relu && i + 1 < L;
    float* y = relu ? m.pre[i] : m.act[i + 1];
    dev::linear_forward(m.kernels, m.act[i], m.weight(m.p, i), m.bias(m.p, i), y, B, m.sizes[i], m.sizes[i + 1],
                        m.stream);
    if (relu) gpu::relu_forward(y, m.act[i + 1], static_cast<size_t>(B * m.sizes[i + 1]), m.stream);
  }
  // mse_loss: the gradient is (out - y) * float(2.0 / n), as src/loss.cc computes it.
  const auto n = static_cast<size_t>(B * m.sizes.back());
  gpu::mse(m.act[L], m.target, m.gy[0], m.losses + m.batches, n, static_cast<float>(2.0 / static_cast<double>(n)),
           m.stream);
  ++m.batches;
  m.backward(m.gy[0], B);
}

// MLP::backward and Linear::backward: per layer the ReLU mask, grad_weight, grad_bias, then grad_input
// (not for the first layer). The first backward since the last step writes .grad; later ones (no_sync)
// compute the micro-batch's gradient apart and add it, as autograd's AccumulateGrad does.
void DeviceReplica::Impl::backward(float* grad_out, int64_t B) {
  float* gcur = grad_out;
  float* gnext = gcur == gy[0] ? gy[1] : gy[0];
  for (size_t i = sizes.size() - 1; i-- > 0;) {
    const int64_t in = sizes[i], out = sizes[i + 1];
    if (cfg.relu && i + 2 < sizes.size()) gpu::relu_backward(pre[i], gcur, static_cast<size_t>(B * out), stream);
    if (!has_grad) {
      dev::linear_grad_weight(kernels, gcur, act[i], weight(g, i), B, in, out, stream);
      dev::linear_grad_bias(gcur, bias(g, i), B, out, stream);
    } else {
      dev::linear_grad_weight(kernels, gcur, act[i], scratch, B, in, out, stream);
      gpu::add(weight(g, i), scratch, static_cast<size_t>(out * in), stream);
      dev::linear_grad_bias(gcur, scratch, B, out, stream);
      gpu::add(bias(g, i), scratch, static_cast<size_t>(out), stream);
    }
    if (i > 0) {
      dev::linear_grad_input(kernels, gcur, weight(p, i), gnext, B, in, out, stream);
      std::swap(gcur, gnext);
    }
  }
  has_grad = true;
}

namespace {

// The bucket loop's tensors in device memory: .grad in the flat gradient array, one bucket buffer sized
// for the largest bucket, every operation enqueued on the communicator's stream (gpu_trainer_ops.h).
class DeviceSyncOps : public ddp::SyncOps {
 public:
  DeviceSyncOps(comm::Communicator& comm, float* grads, const std::vector<size_t>& offset, float* bucket, void* stream)
      : comm_(comm), grads_(grads), offset_(offset), bucket_(bucket), stream_(stream) {}
  float* grad(size_t param) override { return grads_ + offset_[param]; }
  float* bucket(size_t) override { return bucket_; }
  void scale_copy(float* dst, const float* src, size_t n, float scale) override {
    gpu::scale_copy(dst, src, n, scale, stream_);
  }
  void copy(float* dst, const float* src, size_t n) override { gpu::copy(dst, src, n, stream_); }
  void divide(float* a, size_t n, float d) override { gpu::divide(a, n, d, stream_); }
  void all_reduce(float* a, size_t n, comm::ReduceOp op) override { comm_.all_reduce_device(a, n, op); }

 private:
  comm::Communicator& comm_;
  float* grads_;
  const std::vector<size_t>& offset_;
  float* bucket_;
  void* stream_;
};

}  // namespace

void DeviceReplica::sync_and_step() {
  Impl& m = *impl_;
  if (!m.has_grad) throw std::logic_error("DeviceReplica::sync_and_step before any forward_backward");
  // The host trainer's bucket loop (bucket_sync.h) over device memory; the layout is the host Reducer's.
  DeviceSyncOps ops(m.comm, m.g, m.offset, m.bucket, m.stream);
  try {
    ddp::sync_buckets(*m.reducer, ops);
  } catch (...) {
    m.mem.keep = true;
    throw;
  }
  m.reducer->finish_sync();
  device_optimizer_step(m.cfg, m.p, m.g, m.total, m.opt, m.stream);
  m.has_grad = false;  // optimizer.zero_grad(set_to_none=True)
}

void DeviceReplica::wait() { CUDA(cudaStreamSynchronize(impl_->s())); }

std::vector<float> DeviceReplica::download_losses() {
  Impl& m = *impl_;
  const auto n = static_cast<size_t>(m.batches);
  if (n > 0) CUDA(cudaMemcpyAsync(m.pinned_losses, m.losses, n * sizeof(float), cudaMemcpyDeviceToHost, m.s()));
  wait();
  return std::vector<float>(m.pinned_losses, m.pinned_losses + n);
}

void DeviceReplica::download_parameters() {
  Impl& m = *impl_;
  CUDA(cudaMemcpyAsync(m.pinned_params, m.p, m.total * sizeof(float), cudaMemcpyDeviceToHost, m.s()));
  wait();
  for (size_t i = 0; i < m.params.size(); ++i) {
    std::memcpy(m.params[i]->data(), m.pinned_params + m.offset[i], m.params[i]->numel() * sizeof(float));
  }
}

ddp::RankResult train_rank_on_device(const ddp::Config& cfg, comm::Communicator& comm, Kernels kernels) {
  if (std::string why = gpu_trainer_unsupported(cfg); !why.empty()) throw UsageError(why);
  ddp::RankResult res;
  Generator data_gen;
  const Dataset data = ddp::make_dataset(cfg, data_gen);
  res.replica = std::make_unique<ddp::Replica>(cfg, comm.rank());
  ddp::Replica& rep = *res.replica;
  DeviceReplica device(cfg, comm, kernels, rep);
  // run_epochs for one local replica, the per-batch loss read back at the end.
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    if (cfg.set_epoch) rep.sampler.set_epoch(epoch);
    res.sampler_indices.push_back(rep.sampler.indices());
    const auto batches = rep.loader.iter();
    for (size_t b = 0; b < batches.size(); ++b) {
      device.forward_backward(data, batches[b]);
      res.log.push_back({epoch, rep.rank, static_cast<int64_t>(batches[b].size()), 0.0f});
      if (!ddp::is_sync_batch(cfg, b, batches.size())) continue;
      device.sync_and_step();
      ++res.optimizer_steps;
    }
  }
  device.wait();  // the last epoch ended with a synchronised batch: no collective is pending
  res.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<float> losses = device.download_losses();
  for (size_t i = 0; i < res.log.size(); ++i) res.log[i].loss = losses[i];
  device.download_parameters();
  return res;
}

}  // namespace ddplab::dist
