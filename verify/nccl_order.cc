// verify/nccl_order --backend nccl --share-gpus --nccl-exact --nproc N --out FILE
// Records the addition order of real NCCL's all-reduce, so that the simulator's --allreduce nccl-ring can be
// checked against it on machines without a GPU (tests/nccl_ring_test.cc reads what this writes; the command
// that wrote the committed files is tests/golden/nccl/make_nccl_goldens.sh).
//
// For each buffer size n, two kinds of all-reduce (SUM, float32):
//  - probes, one per ring position s: rank s holds +2^30, rank s+1 holds -2^30, every other rank 1. Where an
//    element's sum starts with s and then s+1, the big pair cancels exactly and the ones survive (N - 2);
//    in any other order a 1 meets 2^30, where floats are 128 apart, and is lost. So the probe that gives
//    N - 2 names the rank each element's sum starts at; runs of equal starts are NCCL's chunks.
//    (With 2 ranks every order gives the same bits: no probes.)
//  - a seeded check: rank r holds torch.manual_seed(seed + r); torch.randn(n). The result's FNV-1a hash
//    pins the whole order, not just its first two addends.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/base/flags.h"
#include "src/base/io.h"
#include "src/launch/run_flags.h"
#include "src/launch/runner.h"
#include "src/nccl/nccl_backend.h"
#include "src/data/torch_rng.h"

namespace {

using namespace ddplab;

constexpr const char* kUsage = R"(usage: nccl_order --backend nccl --share-gpus --nccl-exact --nproc N --out FILE
                  [--sizes 1,5,1000,...] [--seed S]
Records real NCCL's all-reduce order (chunk starts, and a hash of seeded sums) as JSON.
)";

// [begin, end, first] runs of equal starting rank (-1: no probe matched).
std::string spans_json(const std::vector<int>& first) {
  std::vector<std::string> runs;
  for (size_t b = 0; b < first.size();) {
    size_t e = b;
    while (e < first.size() && first[e] == first[b]) ++e;
    runs.push_back(fmt::format("[{}, {}, {}]", b, e, first[b]));
    b = e;
  }
  return fmt::format("[{}]", fmt::join(runs, ", "));
}

std::string record_case(comm::Communicator& c, int64_t n, int64_t seed) {
  const int N = c.world_size(), r = c.rank();
  std::string spans = "null";
  if (N > 2) {
    std::vector<int> first(static_cast<size_t>(n), -1);
    std::vector<float> x(static_cast<size_t>(n));
    for (int s = 0; s < N; ++s) {
      const float mine = r == s ? 1073741824.0f : r == (s + 1) % N ? -1073741824.0f : 1.0f;
      std::fill(x.begin(), x.end(), mine);
      c.all_reduce(x.data(), x.size(), comm::ReduceOp::sum);
      for (size_t i = 0; i < x.size(); ++i) {
        if (x[i] == static_cast<float>(N - 2)) first[i] = first[i] == -1 ? s : -2;  // -2: two probes matched
      }
    }
    spans = spans_json(first);
  }
  Generator g(static_cast<uint64_t>(seed + r));
  std::vector<float> x = g.randn(n);
  c.all_reduce(x.data(), x.size(), comm::ReduceOp::sum);
  std::vector<std::string> head;  // a few values, for a reader comparing by eye
  for (size_t i = 0; i < std::min<size_t>(4, x.size()); ++i) head.push_back(json_float(x[i]));
  return fmt::format("    {{\"n\": {}, \"seed\": {}, \"spans\": {}, \"sum_fnv1a\": \"{:016x}\", \"sum_head\": [{}]}}",
                     n, seed, spans, fnv1a_bits(x.data(), x.size()), fmt::join(head, ", "));
}

int run(int argc, char** argv) {
  auto names = dist::runner_flag_names();
  names.insert({"out", "sizes", "seed", "world-size"});
  const Flags flags(argc, argv, names, dist::with_runner_bare_flags());
  if (flags.help()) {
    std::fputs(kUsage, stdout);
    std::fputs(dist::runner_usage().c_str(), stdout);
    return 0;
  }
  const std::string out = flags.get_string("out", "");
  if (out.empty()) throw UsageError("--out FILE is required");
  if (std::string why = check_writable(out); !why.empty()) throw UsageError(why);
  const auto sizes = flags.get_int_list("sizes", {1, 5, 1000, 12345, 1048579, 5000003}, 1, 1 << 26);
  const int64_t seed = flags.get_int("seed", 0, 0, 1 << 30);
  const dist::RunFlags run = dist::read_run_flags(flags, dist::Backends::real);
  if (run.backend != dist::Backend::nccl) throw UsageError("--backend nccl is required");
  const auto prepare = [&](int) {
    return std::vector<std::string>{"sizes", flags.get_string("sizes", ""), "seed", std::to_string(seed)};
  };
  return dist::run_ranks(flags, run, argc, argv, prepare, [&](dist::Rank& rank) {
    std::vector<std::string> cases;
    for (int64_t n : sizes) {
      cases.push_back(record_case(*rank.comm, n, seed));
      if (rank.env.rank == 0)
        std::fprintf(stderr, "nccl_order: ws %d n %lld recorded\n", rank.env.world_size, static_cast<long long>(n));
    }
    if (rank.env.rank != 0) return 0;
    std::vector<std::string> env;
    for (const char* k : {"NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE"}) {
      if (const char* v = std::getenv(k)) env.push_back(fmt::format("\"{}\": \"{}\"", k, v));
    }
    const std::string json = fmt::format(
        "{{\n  \"nccl_version\": \"{}\",\n  \"environment\": {{{}}},\n  \"world_size\": {},\n  \"cases\": [\n{}\n  "
        "]\n}}\n",
        dist::nccl_version(), fmt::join(env, ", "), rank.env.world_size, fmt::join(cases, ",\n"));
    if (std::string why = write_file_atomic(out, json); !why.empty()) throw dist::SetupError(why);
    std::printf("nccl_order: %d ranks, %zu sizes -> %s\n", rank.env.world_size, sizes.size(), out.c_str());
    return 0;
  });
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("nccl_order", argc, argv, run); }
