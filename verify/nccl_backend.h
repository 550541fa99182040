// The NCCL backend: one process per GPU, cudaSetDevice(local_rank), rank 0's ncclUniqueId shared through
// the same store as Gloo's rendezvous, ncclCommInitRank. Built only where CUDA is found at build time
// (//third_party/cuda); elsewhere these functions say so.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "src/comm/communicator.h"
#include "src/kernels.h"
#include "verify/gloo_comm.h"

namespace ddplab::verify {

// "" when this process can use NCCL with `world_size` GPUs on its host, else why not, e.g.
// "NCCL backend needs 2 CUDA devices; cudaGetDeviceCount: CUDA driver version is insufficient ...".
std::string nccl_unavailable_reason(int local_rank, int local_world_size);

// Linear's products on this process's GPU (verify/cuda_kernels.h), for --kernels fast|reference.
const LinearKernels& nccl_kernels(Kernels k);

// Host-pointer collectives: buffers are staged to the device, reduced by NCCL in place there, copied back.
std::unique_ptr<comm::Communicator> connect_nccl(std::shared_ptr<Store> store, int rank, int world_size,
                                                 int local_rank, std::chrono::milliseconds timeout);

}  // namespace ddplab::verify
