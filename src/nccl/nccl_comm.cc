// NCCL communicator. Every CUDA and NCCL call is checked; a failure becomes a CommError (collectives)
// or SetupError (initialisation) naming the call and the library's own error string.
//
// Why nothing here can hang: a peer that dies or hangs leaves an NCCL kernel spinning on this rank's
// stream, and any host call that synchronises with that stream (cudaStreamSynchronize, a cudaMemcpy to or
// from pageable memory, cudaFree) then blocks forever. So the host never waits on the stream directly:
//  - host buffers are staged through pinned memory (cudaMemcpyAsync from/to pinned memory never waits);
//  - completion is an event, polled with cudaEventQuery (never blocks) against the deadline, while
//    ncclCommGetAsyncError reports a peer's broken connection;
//  - the communicator is non-blocking (ncclCommInitRankConfig with blocking = 0): init is polled with the
//    same deadline, and a call that answers ncclInProgress is polled too;
//  - on timeout or error: ncclCommAbort (it makes the spinning kernel exit), and nothing is freed after
//    that (cudaFree would synchronise); the process is about to exit anyway.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "src/tensor/cuda_kernels.h"
#include "src/nccl/nccl_backend.h"

namespace ddplab::dist {
namespace {

using Clock = std::chrono::steady_clock;

std::string cuda_error(const char* call, cudaError_t e) { return fmt::format("{}: {}", call, cudaGetErrorString(e)); }
std::string nccl_error(const char* call, ncclResult_t r) {
  return fmt::format("{}: {} ({})", call, ncclGetErrorString(r), ncclGetLastError(nullptr));
}

#define DDPLAB_CUDA(call, Error)                                                        \
  do {                                                                                  \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) throw Error(cuda_error(#call, e_)); \
  } while (0)

// Polls a non-blocking communicator until its last call has finished: "" when it succeeded, else why not
// ("timed out" after the deadline). Never blocks on the GPU.
std::string poll_comm(ncclComm_t comm, Clock::time_point deadline, cudaEvent_t done = nullptr) {
  const auto start = Clock::now();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess) {
      return nccl_error("ncclCommGetAsyncError", r);
    }
    if (state != ncclSuccess && state != ncclInProgress) return nccl_error("NCCL", state);
    if (state == ncclSuccess) {
      if (!done) return "";
      const cudaError_t q = cudaEventQuery(done);
      if (q == cudaSuccess) return "";
      if (q != cudaErrorNotReady) return cuda_error("cudaEventQuery", q);
    }
    const auto now = Clock::now();
    if (now > deadline) return "timed out";
    // Spin for the first 200 us (a bucket's all-reduce usually ends by then: sleeping would leave the GPU
    // idle while the next kernels wait to be launched), then sleep between polls.
    if (now - start < std::chrono::microseconds(200)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

class NcclComm : public comm::Communicator {
 public:
  NcclComm(std::shared_ptr<Store> store, int rank, int world_size, int device, ncclComm_t nccl, cudaStream_t stream)
      : store_(std::move(store)), rank_(rank), world_size_(world_size), device_(device), nccl_(nccl), stream_(stream) {
    DDPLAB_CUDA(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), SetupError);
  }
  ~NcclComm() override {
    if (!nccl_) return;  // aborted: free nothing (it could synchronise with a kernel that never ends)
    ncclCommDestroy(nccl_);
    if (dev_) cudaFree(dev_);
    if (pinned_) cudaFreeHost(pinned_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string backend() const override { return "nccl"; }
  bool native_avg() const override { return true; }  // ncclAvg: pre-multiply by float(1/nranks), then sum

  // Host buffers: staged through pinned memory into one device buffer, reduced there in place.
  void all_reduce(float* data, size_t n, comm::ReduceOp op) override {
    staged("ncclAllReduce", data, n * sizeof(float), [&](void* dev) { enqueue_all_reduce(dev, n, ncclFloat32, op); });
  }
  // 16-bit host buffers: ncclHalf / ncclBfloat16, NCCL's own 16-bit sum (rounded at every addition) and, for
  // AVG, ncclAvg's own pre-multiply. Unverified: built here, never run on a GPU.
  void all_reduce(Half* data, size_t n, comm::ReduceOp op) override {
    staged("ncclAllReduce", data, n * sizeof(Half), [&](void* dev) { enqueue_all_reduce(dev, n, ncclFloat16, op); });
  }
  void all_reduce(BFloat16* data, size_t n, comm::ReduceOp op) override {
    staged("ncclAllReduce", data, n * sizeof(BFloat16),
           [&](void* dev) { enqueue_all_reduce(dev, n, ncclBfloat16, op); });
  }
  void broadcast(float* data, size_t n, int root) override {
    staged("ncclBroadcast", data, n * sizeof(float),
           [&](void* dev) { enqueue_broadcast(static_cast<float*>(dev), n, root); });
  }
  void all_gather(const void* in, size_t bytes, void* out) override {
    const size_t total = bytes * static_cast<size_t>(world_size_);
    std::memcpy(static_cast<char*>(out) + bytes * static_cast<size_t>(rank_), in, bytes);
    staged("ncclAllGather", out, total, [&](void* dev) {
      // In place: this rank's contribution already sits at its offset of the output.
      call("ncclAllGather", ncclAllGather(static_cast<char*>(dev) + bytes * static_cast<size_t>(rank_), dev, bytes,
                                          ncclChar, nccl_, stream_));
    });
  }
  void barrier() override {
    float one = 1.0f;
    all_reduce(&one, 1, comm::ReduceOp::sum);  // NCCL has no barrier: a one-float all-reduce is one
  }

  // Device buffers: no staging; enqueued on stream_ after whatever the caller enqueued there.
  bool device_resident() const override { return true; }
  void all_reduce_device(float* dev, size_t n, comm::ReduceOp op) override {
    begin("ncclAllReduce");
    enqueue_all_reduce(dev, n, ncclFloat32, op);
    wait();
  }
  void broadcast_device(float* dev, size_t n, int root) override {
    begin("ncclBroadcast");
    enqueue_broadcast(dev, n, root);
    wait();
  }
  void* device_stream() override { return stream_; }

 private:
  void enqueue_all_reduce(void* dev, size_t n, ncclDataType_t type, comm::ReduceOp op) {
    call("ncclAllReduce",
         ncclAllReduce(dev, dev, n, type, op == comm::ReduceOp::avg ? ncclAvg : ncclSum, nccl_, stream_));
  }
  void enqueue_broadcast(float* dev, size_t n, int root) {
    call("ncclBroadcast", ncclBroadcast(dev, dev, n, ncclFloat32, root, nccl_, stream_));
  }

  void begin(const char* name) {
    if (!nccl_)
      throw comm::CommError(
          fmt::format("rank {}: {}: the communicator was aborted by an earlier failure", rank_, name));
    name_ = name;
    seq_ += 1;
    deadline_ = Clock::now() + timeout;
    DDPLAB_CUDA(cudaSetDevice(device_), comm::CommError);
  }
  // A non-blocking communicator may answer ncclInProgress while it enqueues: poll that to the end too.
  void call(const char* what, ncclResult_t r) {
    if (r == ncclSuccess) return;
    if (r == ncclInProgress) {
      if (std::string why = poll_comm(nccl_, deadline_); !why.empty()) fail(why);
      return;
    }
    fail(nccl_error(what, r));
  }
  // Waits for everything enqueued so far, up to the deadline, without blocking on the stream.
  void wait() {
    if (cudaError_t e = cudaEventRecord(done_, stream_); e != cudaSuccess) fail(cuda_error("cudaEventRecord", e));
    if (std::string why = poll_comm(nccl_, deadline_, done_); !why.empty()) fail(why);
  }
  // Aborts, then names the silent peers (through the store's failure marks, as Gloo does), throws. Aborting
  // first closes this rank's connections, so that peers blocked on it fail and report too.
  [[noreturn]] void fail(const std::string& why) {
    ncclCommAbort(nccl_);  // makes the spinning kernel return; the communicator is unusable afterwards
    nccl_ = nullptr;
    const std::string peers =
        name_silent_peers(*store_, rank_, world_size_, fmt::format("{} #{}", name_, seq_ - 1), blame_window(timeout));
    const std::string label = comm::collective_label(name_, seq_ - 1, context);
    if (why == "timed out") {
      throw comm::CommError(fmt::format("rank {}: {} failed after at most {} ms: {} (nccl: no completion)", rank_,
                                        label, timeout.count(), peers));
    }
    throw comm::CommError(fmt::format("rank {}: {} failed: {} ({})", rank_, label, peers, why));
  }

  template <typename Op>
  void staged(const char* name, void* host, size_t bytes, Op op) {
    begin(name);
    if (bytes > capacity_) {
      // Growing happens only between collectives (the last one finished), so freeing cannot block.
      if (dev_) DDPLAB_CUDA(cudaFree(dev_), comm::CommError);
      if (pinned_) DDPLAB_CUDA(cudaFreeHost(pinned_), comm::CommError);
      dev_ = pinned_ = nullptr;
      DDPLAB_CUDA(cudaMalloc(&dev_, bytes), comm::CommError);
      DDPLAB_CUDA(cudaMallocHost(&pinned_, bytes), comm::CommError);
      capacity_ = bytes;
    }
    std::memcpy(pinned_, host, bytes);
    DDPLAB_CUDA(cudaMemcpyAsync(dev_, pinned_, bytes, cudaMemcpyHostToDevice, stream_), comm::CommError);
    op(dev_);
    DDPLAB_CUDA(cudaMemcpyAsync(pinned_, dev_, bytes, cudaMemcpyDeviceToHost, stream_), comm::CommError);
    wait();
    std::memcpy(host, pinned_, bytes);
  }

  std::shared_ptr<Store> store_;
  int rank_, world_size_, device_;
  ncclComm_t nccl_;
  cudaStream_t stream_;
  cudaEvent_t done_ = nullptr;
  void* dev_ = nullptr;
  void* pinned_ = nullptr;
  size_t capacity_ = 0;
  uint64_t seq_ = 0;
  const char* name_ = "";
  Clock::time_point deadline_;
};

}  // namespace

const LinearKernels& nccl_kernels(Kernels k) { return cuda_kernels(k); }

std::string nccl_unavailable_reason(int local_rank, int local_world_size, bool share_gpus) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  const int needed = share_gpus ? 1 : local_world_size;
  // No driver (the CUDA runtime then says "driver version is insufficient") or no device: say that plainly.
  const std::string one = share_gpus || needed == 1 ? "" : "; --share-gpus runs every rank on one GPU";
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
    return fmt::format(
        "NCCL backend needs {} CUDA device{}, and this machine has none: no NVIDIA driver or GPU here "
        "(cudaGetDeviceCount: {}){}",
        needed, needed > 1 ? "s" : "", e == cudaSuccess ? "0 found" : cudaGetErrorString(e), one);
  }
  if (e != cudaSuccess) {
    return fmt::format("NCCL backend needs {} CUDA device{}; cudaGetDeviceCount: {}", needed, needed > 1 ? "s" : "",
                       cudaGetErrorString(e));
  }
  if (!share_gpus && (count < local_world_size || local_rank >= count)) {
    return fmt::format(
        "NCCL backend needs {} CUDA devices; cudaGetDeviceCount: {} found (--share-gpus runs several "
        "ranks on one GPU)",
        local_world_size, count);
  }
  return "";
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);  // NCCL_VERSION_CODE since 2.9
}

int cuda_device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

std::unique_ptr<comm::Communicator> connect_nccl(std::shared_ptr<Store> store, int rank, int world_size, int device,
                                                 std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  DDPLAB_CUDA(cudaSetDevice(device), SetupError);
  // The run's handshake first (a fresh namespace, see src/store/store.h): the id below is never a stale one.
  join_run(*store, rank, world_size, timeout,
           fmt::format("NCCL init of {} ranks did not finish within {} ms:", world_size, timeout.count()));
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) throw SetupError(nccl_error("ncclGetUniqueId", r));
    store_set(*store, "nccl_unique_id", std::string(reinterpret_cast<const char*>(&id), sizeof id));
  }
  std::string bytes;
  try {
    bytes = store_get(*store, "nccl_unique_id",
                      std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                               std::chrono::milliseconds(1)));
  } catch (const std::exception& e) {
    throw SetupError(
        fmt::format("rank {}: no ncclUniqueId from rank 0 within {} ms: {}", rank, timeout.count(), e.what()));
  }
  if (bytes.size() != sizeof id) {
    throw SetupError(fmt::format("the ncclUniqueId in the store has {} bytes, not {}", bytes.size(), sizeof id));
  }
  std::memcpy(&id, bytes.data(), sizeof id);
  cudaStream_t stream = nullptr;
  DDPLAB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), SetupError);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and collectives return at once; poll_comm bounds every wait
  ncclComm_t nccl = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&nccl, world_size, id, rank, &config);
  std::string why =
      r == ncclSuccess || r == ncclInProgress ? poll_comm(nccl, deadline) : nccl_error("ncclCommInitRankConfig", r);
  if (!why.empty()) {
    if (nccl) ncclCommAbort(nccl);
    throw SetupError(why == "timed out"
                         ? fmt::format("rank {}: NCCL init of {} ranks did not finish within {} ms: a rank never "
                                       "joined (exited, hangs, or cannot reach this host)",
                                       rank, world_size, timeout.count())
                         : fmt::format("rank {}: {}", rank, why));
  }
  auto c = std::make_unique<NcclComm>(std::move(store), rank, world_size, device, nccl, stream);
  c->timeout = timeout;
  return c;
}

}  // namespace ddplab::dist
