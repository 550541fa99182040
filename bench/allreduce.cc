// bazel run //bench:allreduce -- Gloo all-reduce of 4 KiB .. 64 MiB float32 between 2 ranks through the
// project's Communicator, in nccl-tests' columns, then torch.distributed (gloo) doing the same
// (bench/allreduce_reference.py, run by this binary). Data: small integers, exact in any order, so #wrong
// counts real errors.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "src/gloo/gloo_comm.h"
#include "src/store/open_store.h"

namespace {

using namespace ddplab;
constexpr int kRanks = 2;

struct Row {
  size_t bytes;
  double us;
  size_t wrong;
};

std::vector<Row> measure(const std::vector<size_t>& sizes) {
  std::string dir = "/tmp/ddplab_bench.XXXXXX";
  if (!mkdtemp(dir.data())) throw std::runtime_error("mkdtemp");
  std::vector<Row> rows(sizes.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto store = dist::open_store(dist::parse_store("file:" + dir), "bench");
      auto comm = dist::connect_gloo(store, r, kRanks, "127.0.0.1", std::chrono::seconds(60));
      for (size_t s = 0; s < sizes.size(); ++s) {
        const size_t n = sizes[s] / sizeof(float);
        std::vector<float> buf(n);
        const int iters = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / sizes[s], 5, 200));
        size_t wrong = 0;
        double total_us = 0;
        for (int it = -2; it < iters; ++it) {  // two warm-up rounds
          for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>((i * 7 + static_cast<size_t>(r) * 3) % 17);
          comm->barrier();
          const auto t0 = std::chrono::steady_clock::now();
          comm->all_reduce(buf.data(), n, comm::ReduceOp::sum);
          const auto t1 = std::chrono::steady_clock::now();
          if (it >= 0) total_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
          if (it == iters - 1) {
            for (size_t i = 0; i < n; ++i) wrong += buf[i] != static_cast<float>((i * 7) % 17 + (i * 7 + 3) % 17);
          }
        }
        if (r == 0) rows[s] = {sizes[s], total_us / iters, wrong};
      }
    });
  }
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(dir);
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string reference = argc > 1 ? argv[1] : "bench/allreduce_reference.py";
  std::vector<size_t> sizes;
  for (size_t b = 4 << 10; b <= (64u << 20); b *= 4) sizes.push_back(b);
  const std::vector<Row> rows = measure(sizes);
  std::map<size_t, double> torch_us;
  const std::string cmd = fmt::format("OPENBLAS_NUM_THREADS=1 /usr/bin/python3 {} 2>&1", reference);
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[256];
    size_t bytes;
    double us;
    while (std::fgets(line, sizeof line, p)) {
      if (std::sscanf(line, "bytes %zu us %lf", &bytes, &us) == 2) torch_us[bytes] = us;
    }
    pclose(p);
  }
  fmt::print("Gloo ring all-reduce, {} ranks on one host (loopback TCP), float32 SUM\n", kRanks);
  fmt::print("{:>12} {:>12} {:>12} {:>10} {:>10} {:>8}   {:>14} {:>10}\n", "size (B)", "count", "time (us)",
             "algbw GB/s", "busbw GB/s", "#wrong", "torch time(us)", "torch/ours");
  for (const Row& r : rows) {
    const double algbw = static_cast<double>(r.bytes) / r.us / 1e3;  // bytes/us = MB/s; / 1e3 -> GB/s
    const double busbw = algbw * 2.0 * (kRanks - 1) / kRanks;
    const auto t = torch_us.find(r.bytes);
    fmt::print("{:>12} {:>12} {:>12.1f} {:>10.3f} {:>10.3f} {:>8}   {:>14} {:>10}\n", r.bytes, r.bytes / 4, r.us, algbw,
               busbw, r.wrong, t == torch_us.end() ? "n/a" : fmt::format("{:.1f}", t->second),
               t == torch_us.end() ? "n/a" : fmt::format("{:.2f}x", t->second / r.us));
  }
  return 0;
}
