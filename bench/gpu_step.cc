// bazel run //bench:gpu_step -- one DDP training step on the GPU: ddplab's device-resident NCCL trainer
// (src/nccl/gpu_trainer.h) next to PyTorch DDP on the nccl backend doing the same on the same GPU
// (bench/gpu_step_reference.py, run by this binary). World size 1: one rank, NCCL connected through a
// temporary file store. Warm-up steps, then the mean time per step between two waits for the GPU.
// Without a GPU it prints CUDA's reason and exits 3.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/ddp/config.h"
#include "src/ddp/trainer.h"
#include "src/device/replica.h"
#include "src/base/flags.h"
#include "src/nccl/gpu_trainer.h"
#include "src/nccl/nccl_backend.h"
#include "src/store/open_store.h"
#include "src/store/store.h"

namespace {

using namespace ddplab;
namespace fs = std::filesystem;

constexpr const char* kUsage = R"(usage: gpu_step [flags]
  --layers L0,L1,...   [1024,4096,4096,1024]  MLP sizes (ReLU between layers)
  --batch-size B       [64]    --lr LR [0.01] (SGD)    --kernels fast|reference [fast]
  --warmup N           [10]    --steps N [50]
  --reference FILE     the PyTorch script [bench/gpu_step_reference.py, next to the binary or the checkout]
  --python PATH        the Python with torch (CUDA) to run it [python3]
)";

constexpr int kDistinctBatches = 8;  // batches cycle through this many, on both sides

// The script: --reference, else where `bazel run` or a checkout (also from .gpu/bin/bench/) keeps it.
std::string find_reference(const Flags& flags) {
  if (flags.has("reference")) return flags.get_string("reference", "");
  const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  for (const fs::path& p :
       {fs::path("bench/gpu_step_reference.py"), self / "gpu_step.runfiles/ddplab/bench/gpu_step_reference.py",
        self / "gpu_step_reference.py", self / "../../../bench/gpu_step_reference.py"}) {
    std::error_code ec;
    if (fs::exists(p, ec)) return p.string();
  }
  return "bench/gpu_step_reference.py";
}

// ddplab: milliseconds per step, after `warmup` steps.
double measure(const ddp::Config& cfg, int64_t warmup, int64_t steps) {
  std::string dir = fs::temp_directory_path().string() + "/ddplab_gpu_step.XXXXXX";
  if (!mkdtemp(dir.data())) throw dist::SetupError("cannot create a store directory in " + dir);
  auto store = dist::open_store(dist::parse_store("file:" + dir), "gpu_step");
  auto comm = dist::connect_nccl(store, 0, 1, 0, std::chrono::seconds(60));
  Generator data_gen;
  const Dataset data = ddp::make_dataset(cfg, data_gen);
  ddp::Replica host(cfg, 0);
  const std::unique_ptr<device::Ops> ops = dist::device_ops(cfg, *comm);
  device::GraphReplica dev(cfg, *comm, cfg.kernels, host, *ops, warmup + steps);
  const auto batches = host.loader.iter();
  const auto step = [&](int64_t s) {
    dev.forward_backward(data, batches[static_cast<size_t>(s) % batches.size()]);
    dev.sync_and_step();  // returns after the all-reduces: waiting for the GPU below is then safe
  };
  for (int64_t s = 0; s < warmup; ++s) step(s);
  dev.wait();
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) step(warmup + s);
  dev.wait();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<float> losses = dev.download_losses();
  fmt::print("ddplab loss: first {:.6f}, last {:.6f}\n", losses.front(), losses.back());
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return ms / static_cast<double>(steps);
}

int run(int argc, char** argv) {
  const Flags flags(argc, argv, {"layers", "batch-size", "lr", "kernels", "warmup", "steps", "reference", "python"});
  if (flags.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  ddp::Config cfg;
  cfg.world_size = 1;
  cfg.layers = flags.get_int_list("layers", {1024, 4096, 4096, 1024}, 1, 1 << 16);
  cfg.relu = true;
  cfg.batch_size = flags.get_int("batch-size", 64, 1, 1 << 16);
  cfg.samples = cfg.batch_size * kDistinctBatches;
  cfg.shuffle = false;
  cfg.lr = flags.get_double("lr", 0.01, 0, 1e6);
  cfg.kernels = parse_kernels(flags.get_choice("kernels", "fast", kernels_names()));
  const int64_t warmup = flags.get_int("warmup", 10, 0, 1 << 20), steps = flags.get_int("steps", 50, 1, 1 << 20);
  ddp::validate(cfg);
  if (std::string why = dist::nccl_unavailable_reason(0, 1); !why.empty()) {
    std::fprintf(stderr, "gpu_step: %s\n", why.c_str());
    return 3;
  }
  const std::string model =
      fmt::format("MLP {} relu, batch {}, MSE, SGD lr {}", fmt::join(cfg.layers, "-"), cfg.batch_size, cfg.lr);
  fmt::print("one DDP training step on GPU 0, world size 1 | {} | {} warm-up + {} timed steps\n", model, warmup, steps);
  std::fflush(stdout);
  double ours = 0;
  try {
    ours = measure(cfg, warmup, steps);
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_step: %s\n", e.what());
    return 1;
  }

  const std::string cmd = fmt::format("{} {} --layers {} --batch {} --lr {} --warmup {} --steps {} 2>&1",
                                      flags.get_string("python", "python3"), find_reference(flags),
                                      fmt::join(cfg.layers, ","), cfg.batch_size, cfg.lr, warmup, steps);
  double torch_ms = -1;
  std::string last;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[1024];
    while (std::fgets(line, sizeof line, p)) {
      if (std::sscanf(line, "ms_per_step %lf", &torch_ms) != 1 && line[0] != '\n') last = line;
    }
    pclose(p);
  }
  fmt::print("{:<58} {:>10}\n", "", "ms/step");
  fmt::print("{:<58} {:>10.3f}\n",
             fmt::format("ddplab (NCCL, model on the GPU, --kernels {})", kernels_name(cfg.kernels)), ours);
  if (torch_ms <= 0) {
    fmt::print("{:<58} {:>10}   ({})\n", "PyTorch DDP (nccl, cuda:0)", "n/a",
               last.empty() ? cmd : last.substr(0, last.find('\n')));
    return 1;
  }
  fmt::print("{:<58} {:>10.3f}   {}", "PyTorch DDP (nccl, cuda:0)", torch_ms, last);
  if (last.empty() || last.back() != '\n') fmt::print("\n");
  const double ratio = ours / torch_ms;
  fmt::print("ddplab / PyTorch: {:.2f}x (target: at most 1.5x) {}\n", ratio, ratio <= 1.5 ? "met" : "NOT met");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("gpu_step", argc, argv, run); }
