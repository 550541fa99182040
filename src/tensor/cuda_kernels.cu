#include "src/tensor/cuda_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace ddplab {
namespace {

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(call) + ": cuBLAS status " + std::to_string(s));
}
#define CHECK(call) check((call), #call)

// Device scratch for up to four operands, grown on demand and kept (one set per host thread).
struct Scratch {
  float* p[4] = {nullptr, nullptr, nullptr, nullptr};
  size_t n[4] = {0, 0, 0, 0};
  float* get(int i, size_t count) {
    if (count > n[i]) {
      if (p[i]) CHECK(cudaFree(p[i]));
      p[i] = nullptr;
      CHECK(cudaMalloc(&p[i], count * sizeof(float)));
      n[i] = count;
    }
    return p[i];
  }
};
thread_local Scratch scratch;

float* to_device(int slot, const float* host, size_t count) {
  float* d = scratch.get(slot, count);
  CHECK(cudaMemcpy(d, host, count * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}
void to_host(float* host, const float* dev, size_t count) {
  CHECK(cudaMemcpy(host, dev, count * sizeof(float), cudaMemcpyDeviceToHost));
}
unsigned blocks(int64_t n) { return static_cast<unsigned>((n + 255) / 256); }

// --- reference kernels: the loops of src/tensor/kernels.cc, one output element per thread -------------------
__global__ void ref_forward(const float* x, const float* w, const float* bias, float* y, int64_t batch, int64_t in,
                            int64_t out) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= batch * out) return;
  const int64_t b = t / out, o = t % out;
  float acc = 0.0f;
  for (int64_t k = 0; k < in; ++k) acc = acc + x[b * in + k] * w[o * in + k];
  y[t] = acc + bias[o];
}
__global__ void ref_grad_input(const float* gy, const float* w, float* gx, int64_t batch, int64_t in, int64_t out) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= batch * in) return;
  const int64_t b = t / in, i = t % in;
  float acc = 0.0f;
  for (int64_t o = 0; o < out; ++o) acc = acc + gy[b * out + o] * w[o * in + i];
  gx[t] = acc;
}
__global__ void ref_grad_weight(const float* gy, const float* x, float* gw, int64_t batch, int64_t in, int64_t out) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= out * in) return;
  const int64_t o = t / in, i = t % in;
  float acc = 0.0f;
  for (int64_t b = 0; b < batch; ++b) acc = acc + gy[b * out + o] * x[b * in + i];
  gw[t] = acc;
}
__global__ void ref_grad_bias(const float* gy, float* gb, int64_t batch, int64_t out) {
  const int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (o >= out) return;
  float acc = 0.0f;
  for (int64_t b = 0; b < batch; ++b) acc = acc + gy[b * out + o];
  gb[o] = acc;
}
__global__ void fill_bias_rows(const float* bias, float* y, int64_t batch, int64_t out) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t < batch * out) y[t] = bias[t % out];
}

void launched(const char* name) { check(cudaGetLastError(), name); }

// --- fast: cuBLAS, with the column-major mapping of src/tensor/gemm.cc -------------------------------------
// cuBLAS is opened on first use, not linked: loading libcublasLt runs about 0.7 s of static initialisers
// (measured with perf on this project's CUDA 13), which every process paid at start, GPU or not.
struct Cublas {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
};
void* open_cublas() {
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  if (void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  const char* err = dlerror();
  const std::string why = err != nullptr ? err : soname;
  // Beside the CUDA runtime this binary was linked with (the toolkit's lib directory).
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetErrorString), &info) != 0 && info.dli_fname != nullptr) {
    std::string dir = info.dli_fname;
    dir = dir.substr(0, dir.find_last_of('/') + 1);
    if (void* h = dlopen((dir + soname).c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  }
  throw std::runtime_error("cannot load cuBLAS for --kernels fast: " + why);
}
template <typename F>
void resolve(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (f == nullptr) throw std::runtime_error(std::string("cuBLAS has no ") + name);
}
const Cublas& cublas() {
  static const Cublas api = [] {
    void* lib = open_cublas();  // kept open for the process
    Cublas a;
    resolve(lib, "cublasCreate_v2", a.create);
    resolve(lib, "cublasSetMathMode", a.set_math_mode);
    resolve(lib, "cublasSetStream_v2", a.set_stream);
    resolve(lib, "cublasSgemm_v2", a.sgemm);
    return a;
  }();
  return api;
}

cublasHandle_t handle(cudaStream_t stream) {
  static const cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    CHECK(cublas().create(&created));
    // No TF32 or other reduced-precision paths: float32 in, float32 math.
    CHECK(cublas().set_math_mode(created, CUBLAS_DEFAULT_MATH));
    return created;
  }();
  CHECK(cublas().set_stream(h, stream));
  return h;
}
void sgemm(cudaStream_t s, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const float one = 1.0f;
  CHECK(cublas().sgemm(handle(s), ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(m),
                       static_cast<int>(n), static_cast<int>(k), &one, a, static_cast<int>(lda), b,
                       static_cast<int>(ldb), &beta, c, static_cast<int>(ldc)));
}

// --- the host table: stage, run the device entry point on the default stream, copy back ------------
void gpu_forward(Kernels k, const float* x, const float* w, const float* bias, float* y, int64_t batch, int64_t in,
                 int64_t out) {
  float* dx = to_device(0, x, batch * in);
  float* dw = to_device(1, w, out * in);
  float* db = to_device(2, bias, out);
  float* dy = scratch.get(3, batch * out);
  dev::linear_forward(k, dx, dw, db, dy, batch, in, out, nullptr);
  to_host(y, dy, batch * out);
}
void gpu_grad_input(Kernels k, const float* gy, const float* w, float* gx, int64_t batch, int64_t in, int64_t out) {
  float* dgy = to_device(0, gy, batch * out);
  float* dw = to_device(1, w, out * in);
  float* dgx = scratch.get(3, batch * in);
  dev::linear_grad_input(k, dgy, dw, dgx, batch, in, out, nullptr);
  to_host(gx, dgx, batch * in);
}
void gpu_grad_weight(Kernels k, const float* gy, const float* x, float* gw, int64_t batch, int64_t in, int64_t out) {
  float* dgy = to_device(0, gy, batch * out);
  float* dx = to_device(1, x, batch * in);
  float* dgw = scratch.get(3, out * in);
  dev::linear_grad_weight(k, dgy, dx, dgw, batch, in, out, nullptr);
  to_host(gw, dgw, out * in);
}
void gpu_grad_bias(const float* gy, float* gb, int64_t batch, int64_t out) {
  float* dgy = to_device(0, gy, batch * out);
  float* dgb = scratch.get(3, out);
  dev::linear_grad_bias(dgy, dgb, batch, out, nullptr);
  to_host(gb, dgb, out);
}

void gpu_ref_forward(const float* x, const float* w, const float* b, float* y, int64_t batch, int64_t in, int64_t out) {
  gpu_forward(Kernels::reference, x, w, b, y, batch, in, out);
}
void gpu_ref_grad_input(const float* gy, const float* w, float* gx, int64_t batch, int64_t in, int64_t out) {
  gpu_grad_input(Kernels::reference, gy, w, gx, batch, in, out);
}
void gpu_ref_grad_weight(const float* gy, const float* x, float* gw, int64_t batch, int64_t in, int64_t out) {
  gpu_grad_weight(Kernels::reference, gy, x, gw, batch, in, out);
}
void gpu_fast_forward(const float* x, const float* w, const float* b, float* y, int64_t batch, int64_t in,
                      int64_t out) {
  gpu_forward(Kernels::fast, x, w, b, y, batch, in, out);
}
void gpu_fast_grad_input(const float* gy, const float* w, float* gx, int64_t batch, int64_t in, int64_t out) {
  gpu_grad_input(Kernels::fast, gy, w, gx, batch, in, out);
}
void gpu_fast_grad_weight(const float* gy, const float* x, float* gw, int64_t batch, int64_t in, int64_t out) {
  gpu_grad_weight(Kernels::fast, gy, x, gw, batch, in, out);
}

const LinearKernels kGpuReference = {"reference on the GPU (fixed-order kernels, --fmad=false)", gpu_ref_forward,
                                     gpu_ref_grad_input, gpu_ref_grad_weight, gpu_grad_bias};
const LinearKernels kGpuFast = {"fast on the GPU (cuBLAS)", gpu_fast_forward, gpu_fast_grad_input, gpu_fast_grad_weight,
                                gpu_grad_bias};

}  // namespace

const LinearKernels& cuda_kernels(Kernels k) { return k == Kernels::fast ? kGpuFast : kGpuReference; }

namespace dev {

void linear_forward(Kernels k, const float* x, const float* w, const float* bias, float* y, int64_t batch, int64_t in,
                    int64_t out, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (batch * out == 0) return;
  if (k == Kernels::reference) {
    ref_forward<<<blocks(batch * out), 256, 0, s>>>(x, w, bias, y, batch, in, out);
    launched("ref_forward");
    return;
  }
  fill_bias_rows<<<blocks(batch * out), 256, 0, s>>>(bias, y, batch, out);  // addmm: beta = 1 on the bias rows
  launched("fill_bias_rows");
  sgemm(s, true, false, out, batch, in, w, in, x, in, 1.0f, y, out);
}
void linear_grad_input(Kernels k, const float* gy, const float* w, float* gx, int64_t batch, int64_t in, int64_t out,
                       void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (batch * in == 0) return;
  if (k == Kernels::reference) {
    ref_grad_input<<<blocks(batch * in), 256, 0, s>>>(gy, w, gx, batch, in, out);
    launched("ref_grad_input");
    return;
  }
  sgemm(s, false, false, in, batch, out, w, in, gy, out, 0.0f, gx, in);
}
void linear_grad_weight(Kernels k, const float* gy, const float* x, float* gw, int64_t batch, int64_t in, int64_t out,
                        void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (out * in == 0) return;
  if (k == Kernels::reference) {
    ref_grad_weight<<<blocks(out * in), 256, 0, s>>>(gy, x, gw, batch, in, out);
    launched("ref_grad_weight");
    return;
  }
  sgemm(s, false, true, in, out, batch, x, in, gy, out, 0.0f, gw, in);
}
void linear_grad_bias(const float* gy, float* gb, int64_t batch, int64_t out, void* stream) {
  if (out == 0) return;
  ref_grad_bias<<<blocks(out), 256, 0, static_cast<cudaStream_t>(stream)>>>(gy, gb, batch, out);
  launched("ref_grad_bias");
}

}  // namespace dev

}  // namespace ddplab
