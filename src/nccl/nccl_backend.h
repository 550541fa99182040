// The NCCL backend: one process per GPU (or, with --share-gpus, several ranks per GPU, each posing as its
// own host), rank 0's ncclUniqueId shared through the same store as Gloo's rendezvous, a non-blocking
// ncclCommInitRankConfig polled against the timeout. Built only where CUDA is found at build time
// (//third_party/cuda); elsewhere these functions say so.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "src/comm/communicator.h"
#include "src/tensor/kernels.h"
#include "src/store/store.h"

namespace ddplab::dist {

// "" when this process can use NCCL with `local_world_size` ranks on its host (one GPU each, or any number
// of GPUs with `share_gpus`), else why not, e.g.
// "NCCL backend needs 2 CUDA devices; cudaGetDeviceCount: CUDA driver version is insufficient ...".
std::string nccl_unavailable_reason(int local_rank, int local_world_size, bool share_gpus = false);
// CUDA devices visible to this process (0 without CUDA or a driver).
int cuda_device_count();
// The NCCL library in use, "2.28.9" (ncclGetVersion), or "none" where built without CUDA.
std::string nccl_version();

// Linear's products on this process's GPU (src/tensor/cuda_kernels.h), for --kernels fast|reference.
const LinearKernels& nccl_kernels(Kernels k);

// A communicator on GPU `device`. Host-pointer collectives are staged through pinned memory; the device
// ones (Communicator::all_reduce_device) run on device memory directly. Every wait is bounded by
// `timeout`: a peer that exits or hangs becomes a CommError naming it, after ncclCommAbort.
std::unique_ptr<comm::Communicator> connect_nccl(std::shared_ptr<Store> store, int rank, int world_size, int device,
                                                 std::chrono::milliseconds timeout);

}  // namespace ddplab::dist
