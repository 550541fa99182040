// bazel run //sim:rng -- --seed 12345 randn 6
// Prints what torch.manual_seed(S); torch.randn(N) (or rand, randperm) gives, one value per line.
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "src/base/flags.h"
#include "src/data/torch_rng.h"

namespace {

constexpr const char* kUsage = R"(usage: rng [--seed S] randn|rand|randperm N
Prints torch.manual_seed(S); torch.<kind>(N) one value per line (floats with 9 significant digits,
enough to give back the exact float32). Default seed: 12345.
)";

int run(int argc, char** argv) {
  const ddplab::Flags flags(argc, argv, {"seed"});
  if (flags.help()) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const auto& args = flags.positional();
  if (args.size() != 2) throw ddplab::UsageError("expected two arguments: randn|rand|randperm N");
  const std::string kind = args[0];
  if (kind != "randn" && kind != "rand" && kind != "randperm") {
    throw ddplab::UsageError("kind must be randn, rand or randperm (got '" + kind + "')");
  }
  constexpr int64_t kMax = 100'000'000;
  const int64_t n = ddplab::parse_int("N", args[1]);
  if (n < 0 || n > kMax) throw ddplab::UsageError(fmt::format("N must be in [0, {}] (got {})", kMax, n));
  ddplab::Generator& g = ddplab::default_generator();
  g.manual_seed(static_cast<uint64_t>(flags.get_int("seed", 12345, 0, INT64_MAX)));
  std::string out;
  if (kind == "randperm") {
    for (int64_t v : g.randperm(n)) out += fmt::format("{}\n", v);
  } else {
    for (float v : kind == "randn" ? g.randn(n) : g.rand(n)) out += fmt::format("{:.9g}\n", v);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddplab::guarded_main("rng", argc, argv, run); }
