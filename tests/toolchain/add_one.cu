// A minimal kernel compiled by //third_party/cuda's cuda_library, with every CUDA call checked.
#include <cuda_runtime.h>

#include "tests/toolchain/add_one.h"

namespace {

__global__ void add_one_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

std::string fail(const char* call, cudaError_t e) { return std::string(call) + ": " + cudaGetErrorString(e); }

}  // namespace

std::string add_one_on_gpu(std::vector<float>& x) {
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess) return fail("cudaGetDeviceCount", e);
  if (devices == 0) return "cudaGetDeviceCount: no CUDA device";
  const size_t bytes = x.size() * sizeof(float);
  float* d = nullptr;
  if (cudaError_t e = cudaMalloc(&d, bytes); e != cudaSuccess) return fail("cudaMalloc", e);
  std::string err;
  if (cudaError_t e = cudaMemcpy(d, x.data(), bytes, cudaMemcpyHostToDevice); e != cudaSuccess) {
    err = fail("cudaMemcpy H2D", e);
  } else {
    const int n = static_cast<int>(x.size());
    add_one_kernel<<<(n + 255) / 256, 256>>>(d, n);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
      err = fail("add_one_kernel launch", e);
    } else if (cudaError_t e2 = cudaMemcpy(x.data(), d, bytes, cudaMemcpyDeviceToHost); e2 != cudaSuccess) {
      err = fail("cudaMemcpy D2H", e2);
    }
  }
  cudaFree(d);
  return err;
}
