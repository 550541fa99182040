// NCCL communicator. Every CUDA and NCCL call is checked; a failure becomes a CommError (collectives)
// or SetupError (initialisation) naming the call and the library's own error string. Collectives are
// enqueued on one stream and waited for with a deadline (ncclCommAbort on timeout), so nothing hangs.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "verify/cuda_kernels.h"
#include "verify/nccl_backend.h"

namespace ddplab::verify {
namespace {

std::string cuda_error(const char* call, cudaError_t e) { return fmt::format("{}: {}", call, cudaGetErrorString(e)); }

#define DDPLAB_CUDA(call, Error)                                      \
  do {                                                                \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) throw Error(cuda_error(#call, e_)); \
  } while (0)

std::string nccl_error(const char* call, ncclResult_t r) { return fmt::format("{}: {}", call, ncclGetErrorString(r)); }

class NcclComm : public comm::Communicator {
 public:
  NcclComm(int rank, int world_size, int device, ncclComm_t nccl, cudaStream_t stream)
      : rank_(rank), world_size_(world_size), device_(device), nccl_(nccl), stream_(stream) {}
  ~NcclComm() override {
    if (dev_) cudaFree(dev_);
    if (nccl_) ncclCommDestroy(nccl_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return "nccl"; }
  bool native_avg() const override { return true; }  // ncclAvg: pre-multiply by float(1/nranks), then sum

  void all_reduce(float* data, size_t n, comm::ReduceOp op) override {
    staged("ncclAllReduce", data, n * sizeof(float), [&](void* dev) {
      return ncclAllReduce(dev, dev, n, ncclFloat32, op == comm::ReduceOp::avg ? ncclAvg : ncclSum, nccl_, stream_);
    });
  }
  void broadcast(float* data, size_t n, int root) override {
    staged("ncclBroadcast", data, n * sizeof(float),
           [&](void* dev) { return ncclBroadcast(dev, dev, n, ncclFloat32, root, nccl_, stream_); });
  }
  void all_gather(const void* in, size_t bytes, void* out) override {
    const size_t total = bytes * static_cast<size_t>(world_size_);
    std::memcpy(static_cast<char*>(out) + bytes * static_cast<size_t>(rank_), in, bytes);
    staged("ncclAllGather", out, total, [&](void* dev) {
      // In place: this rank's contribution already sits at its offset of the output.
      return ncclAllGather(static_cast<char*>(dev) + bytes * static_cast<size_t>(rank_), dev, bytes, ncclChar, nccl_,
                           stream_);
    });
  }
  void barrier() override {
    float one = 1.0f;
    all_reduce(&one, 1, comm::ReduceOp::sum);  // NCCL has no barrier: a one-float all-reduce is one
  }

 private:
  // Copies `bytes` of `host` to the device, runs `op` there in place, waits up to the timeout, copies back.
  template <typename Op>
  void staged(const char* name, void* host, size_t bytes, Op op) {
    const uint64_t seq = seq_++;
    DDPLAB_CUDA(cudaSetDevice(device_), comm::CommError);
    if (bytes > capacity_) {
      if (dev_) DDPLAB_CUDA(cudaFree(dev_), comm::CommError);
      dev_ = nullptr;
      DDPLAB_CUDA(cudaMalloc(&dev_, bytes), comm::CommError);
      capacity_ = bytes;
    }
    DDPLAB_CUDA(cudaMemcpyAsync(dev_, host, bytes, cudaMemcpyHostToDevice, stream_), comm::CommError);
    if (ncclResult_t r = op(dev_); r != ncclSuccess) {
      throw comm::CommError(fmt::format("rank {}: {} #{}: {}", rank_, name, seq, nccl_error(name, r)));
    }
    DDPLAB_CUDA(cudaMemcpyAsync(host, dev_, bytes, cudaMemcpyDeviceToHost, stream_), comm::CommError);
    // Wait with a deadline: a peer that died leaves the kernel spinning forever otherwise.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) throw comm::CommError(fmt::format("rank {}: {} #{}: {}", rank_, name, seq,
                                                                   cuda_error("cudaStreamQuery", q)));
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(nccl_, &async) == ncclSuccess && async != ncclSuccess) {
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
        throw comm::CommError(fmt::format("rank {}: {} #{}: {}", rank_, name, seq, nccl_error("async", async)));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ncclCommAbort(nccl_);  // unblocks the stream; the communicator is unusable afterwards
        nccl_ = nullptr;
        throw comm::CommError(fmt::format("rank {}: {} #{} timed out after {} ms (a peer is gone or hangs)", rank_,
                                          name, seq, timeout.count()));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  int rank_, world_size_, device_;
  ncclComm_t nccl_;
  cudaStream_t stream_;
  void* dev_ = nullptr;
  size_t capacity_ = 0;
  uint64_t seq_ = 0;
};

}  // namespace

const LinearKernels& nccl_kernels(Kernels k) { return cuda_kernels(k); }

std::string nccl_unavailable_reason(int local_rank, int local_world_size) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return fmt::format("NCCL backend needs {} CUDA devices; cudaGetDeviceCount: {}", local_world_size,
                       cudaGetErrorString(e));
  }
  if (count < local_world_size || local_rank >= count) {
    return fmt::format("NCCL backend needs {} CUDA devices; cudaGetDeviceCount: {} found", local_world_size, count);
  }
  return "";
}

std::unique_ptr<comm::Communicator> connect_nccl(std::shared_ptr<Store> store, int rank, int world_size,
                                                 int local_rank, std::chrono::milliseconds timeout) {
  DDPLAB_CUDA(cudaSetDevice(local_rank), SetupError);
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) throw SetupError(nccl_error("ncclGetUniqueId", r));
    store_set(*store, "nccl_unique_id", std::string(reinterpret_cast<const char*>(&id), sizeof id));
  }
  std::string bytes;
  try {
    bytes = store_get(*store, "nccl_unique_id", timeout);
  } catch (const std::exception& e) {
    throw SetupError(fmt::format("rank {}: no ncclUniqueId from rank 0 within {} ms: {}", rank, timeout.count(),
                                 e.what()));
  }
  if (bytes.size() != sizeof id) throw SetupError("the ncclUniqueId in the store has the wrong size");
  std::memcpy(&id, bytes.data(), sizeof id);
  cudaStream_t stream = nullptr;
  DDPLAB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), SetupError);
  ncclComm_t nccl = nullptr;
  if (ncclResult_t r = ncclCommInitRank(&nccl, world_size, id, rank); r != ncclSuccess) {
    cudaStreamDestroy(stream);
    throw SetupError(fmt::format("rank {}: {}", rank, nccl_error("ncclCommInitRank", r)));
  }
  auto c = std::make_unique<NcclComm>(rank, world_size, local_rank, nccl, stream);
  c->timeout = timeout;
  return c;
}

}  // namespace ddplab::verify
