// A seeded mutation fuzzer, deterministic (same cases every run), for the DDP flags (Flags +
// ddp::config_from_flags, as sim/ddp_sim.cc reads them, with mutated values), and the same for --model gpt's
// flags (ddp::config_from_flags with --model gpt, as ddp_sim reads them) with its bad inputs' messages. Every case must end
// in UsageError or a Config: any other exception, a crash (the sanitizer builds run this too) or an allocation over
// kMaxAlloc fails. Prints one summary line, e.g.
//   fuzz ddp flags: 50000 cases, 40000 refused cleanly, 10000 accepted, 0 crashes
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "src/ddp/config.h"
#include "src/base/flags.h"
#include "src/gpt/train.h"
#include "tests/fuzz.h"

namespace ddplab {
namespace {

using namespace fuzz;

constexpr int kFlagCases = 50000;

// ---- Flags for the DDP config, as sim/ddp_sim.cc parses them. ----

const std::vector<std::string> kSimExtras = {"compare-single-device", "explain",   "trace",
                                             "link-latency-us",       "link-gbps", "compute-gflops",
                                             "dump-params",           "quiet"};

// sim/ddp_sim.cc's reading of its flags, everything but running the simulation.
ddp::Config parse_like_ddp_sim(const std::vector<std::string>& args) {
  auto known = ddp::config_flag_names();
  known.insert(kSimExtras.begin(), kSimExtras.end());
  std::vector<std::string> storage = {"ddp_sim"};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  const Flags flags(static_cast<int>(storage.size()), argv.data(), known, {"explain", "quiet"});
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  const ddp::Config cfg = ddp::config_from_flags(flags);
  flags.get_bool("compare-single-device", false);
  flags.get_bool("explain", false);
  flags.get_bool("quiet", false);
  flags.get_double("link-latency-us", 5, 0.0, 1e9);
  flags.get_double("link-gbps", 10, 1e-6, 1e9);
  flags.get_double("compute-gflops", 50, 1e-6, 1e9);
  flags.get_string("trace", "");
  flags.get_string("dump-params", "");
  return cfg;
}

// A value that the flag accepts on its own (others may still refuse it in combination).
std::string valid_value(Rng& rng, const std::string& name) {
  static const std::map<std::string, std::vector<std::string>> kChoices = {
      {"world-size", {"1", "2", "3", "4", "8", "64"}},
      {"layers", {"6,4,2", "2,2", "2,8,2", "1,1", "3,5,7,2"}},
      {"activation", {"none", "relu"}},
      {"loss", {"mse", "ce", "ce-probs"}},
      {"optimizer", {"sgd", "adam"}},
      {"lr", {"0.01", "0.1", "1e-3", "0", "1e6"}},
      {"momentum", {"0", "0.9", "1"}},
      {"dataset", {"random", "toy", "rand"}},
      {"samples", {"1", "5", "64", "1000"}},
      {"seed", {"0", "12345", "9223372036854775807"}},
      {"sampler-seed", {"0", "7"}},
      {"batch-size", {"1", "2", "8", "32"}},
      {"epochs", {"1", "3"}},
      {"init", {"same", "per-rank", "continue"}},
      {"average", {"predivide", "postdivide", "avg"}},
      {"bucket-cap-mb", {"25", "1e-6", "0.001", "1e6"}},
      {"no-sync", {"1", "2", "4"}},
      {"allreduce", {"naive", "ring", "halving-doubling", "tree", "nccl-ring"}},
      {"kernels", {"fast", "reference"}},
      {"link-latency-us", {"5", "0"}},
      {"link-gbps", {"10", "1e-6"}},
      {"compute-gflops", {"50"}},
      {"trace", {"/tmp/x.json"}},
      {"dump-params", {"/tmp/y.json"}},
  };
  const auto it = kChoices.find(name);
  if (it != kChoices.end()) return pick(rng, it->second);
  return pick(rng, std::vector<std::string>{"true", "false", "1", "0"});  // the booleans
}

const std::vector<std::string> kBadValues = {"",
                                             "-1",
                                             "0",
                                             "-0",
                                             "99999999999999999999",
                                             "-99999999999999999999",
                                             "9223372036854775807",
                                             "9223372036854775808",
                                             "-9223372036854775808",
                                             "18446744073709551616",
                                             "1e308",
                                             "1e309",
                                             "-1e309",
                                             "1e-320",
                                             "nan",
                                             "NaN",
                                             "inf",
                                             "-inf",
                                             "0x10",
                                             "0x1p-3",
                                             " 5",
                                             "5 ",
                                             "+5",
                                             "abc",
                                             "true",
                                             "false",
                                             "yes",
                                             ",",
                                             ",,",
                                             "1,,2",
                                             ",1",
                                             "1,",
                                             "-1,2",
                                             "2,-1",
                                             "65536,65537",
                                             "1,99999999999999999999",
                                             "6;4;2",
                                             "6 4 2",
                                             "1.5",
                                             "1e3",
                                             "ring",
                                             "relu",
                                             "sgd",
                                             "per-rank",
                                             "--",
                                             "=",
                                             "\xc3\xa9",
                                             "\xff",
                                             std::string(1, '\0'),
                                             std::string(10000, '7'),
                                             std::string(5000, '1') + "," + std::string(5000, '1')};

std::string mutate_value(Rng& rng, std::string v) {
  static const std::string kChars = "0123456789-+.,eE xa";
  switch (pick(rng, 4)) {
    case 0:
      if (!v.empty()) v.erase(pick(rng, v.size()), 1);
      break;
    case 1:
      v.insert(pick(rng, v.size() + 1), 1, kChars[pick(rng, kChars.size())]);
      break;
    case 2:
      if (!v.empty()) v[pick(rng, v.size())] = kChars[pick(rng, kChars.size())];
      break;
    default:
      v += v;
  }
  return v;
}

TEST(Fuzz, DdpFlagsEndInUsageErrorOrAConfig) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> names;
  for (const std::string& n : ddp::config_flag_names()) names.push_back(n);
  names.insert(names.end(), kSimExtras.begin(), kSimExtras.end());
  const std::vector<std::string> kBadNames = {"", "world_size", "WORLD-SIZE", "-lr", "layers=", "x", "help=1"};
  // A long list: every entry valid, one Config with a 3000-layer MLP description (nothing is allocated by size).
  std::string many = "2";
  for (int i = 0; i < 3000; ++i) many += ",2";
  Rng rng(kSeed + 1);
  int refused = 0, accepted = 0, crashes = 0;
  for (int c = 0; c < kFlagCases; ++c) {
    std::vector<std::string> args;
    const uint64_t nflags = pick(rng, 7);
    for (uint64_t i = 0; i < nflags; ++i) {
      const uint64_t r = pick(rng, 100);
      const std::string name = r < 92 ? pick(rng, names) : pick(rng, kBadNames);
      std::string value;
      const uint64_t how = pick(rng, 10);
      if (how < 5)
        value = valid_value(rng, name);
      else if (how < 8)
        value = pick(rng, kBadValues);
      else if (how < 9)
        value = mutate_value(rng, valid_value(rng, name));
      else
        value = name == "layers" ? many : mutate_value(rng, pick(rng, kBadValues));
      const uint64_t form = pick(rng, 20);
      if (form < 14) {
        args.push_back("--" + name);
        args.push_back(value);
      } else if (form < 18) {
        args.push_back("--" + name + "=" + value);
      } else if (form < 19) {
        args.push_back("--" + name);  // no value: a bare flag, or the next flag taken as missing value
      } else {
        args.push_back(value);  // a positional argument
      }
    }
    std::string failure;
    bool was_accepted = false;
    g_largest = 0;
    try {
      const ddp::Config cfg = parse_like_ddp_sim(args);
      was_accepted = true;
      // What was accepted reads back the same from its own flags (to_args is what goldens and hashes use).
      const std::vector<std::string> again = ddp::to_args(cfg);
      try {
        if (ddp::to_args(parse_like_ddp_sim(again)) != again) failure = "to_args does not read back the same config";
      } catch (const std::exception& e) {
        failure = std::string("its own to_args is refused: ") + e.what();
      }
      ddp::describe(cfg);
    } catch (const UsageError& e) {
      if (std::string(e.what()).find('\n') != std::string::npos)
        failure = std::string("message not one line: ") + e.what();
    } catch (const std::exception& e) {
      failure = std::string("another exception: ") + e.what();
    } catch (...) {
      failure = "a non-std exception";
    }
    if (g_largest > kMaxAlloc) failure += " allocation of " + std::to_string(g_largest.load()) + " bytes";
    if (failure.empty()) (was_accepted ? accepted : refused)++;
    if (!failure.empty()) {
      ++crashes;
      std::string line;
      for (const std::string& a : args) line += " [" + a.substr(0, 40) + "]";
      ADD_FAILURE() << "case " << c << ":" << line << ": " << failure;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz ddp flags: %d cases, %d refused cleanly, %d accepted, %d crashes (seed %llu, %.1f s)\n", kFlagCases,
              refused, accepted, crashes, static_cast<unsigned long long>(kSeed + 1), secs);
  EXPECT_EQ(crashes, 0);
  EXPECT_GT(accepted, kFlagCases / 20) << "too few cases get past the parser to exercise config_from_flags fully";
  EXPECT_GT(refused, kFlagCases / 4);
}

// ---- --model gpt's flags, as sim/gpt_sim.cc reads them (the data file is read later, by the program). ----

ddp::Config parse_like_gpt_sim(const std::vector<std::string>& args) {
  auto known = ddp::config_flag_names();
  known.insert({"dump-params", "quiet"});
  std::vector<std::string> storage = {"ddp_sim"};
  const bool names_model = std::any_of(args.begin(), args.end(), [](const std::string& a) { return a.rfind("--model", 0) == 0; });
  if (!names_model) storage.insert(storage.end(), {"--model", "gpt"});
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  const Flags flags(static_cast<int>(storage.size()), argv.data(), known, {"seed-per-rank", "quiet"});
  if (!flags.positional().empty()) throw UsageError("unexpected argument '" + flags.positional()[0] + "' (see --help)");
  const ddp::Config cfg = ddp::config_from_flags(flags);
  flags.get_bool("quiet", false);
  flags.get_string("dump-params", "");
  return cfg;
}

std::string valid_gpt_value(Rng& rng, const std::string& name) {
  static const std::map<std::string, std::vector<std::string>> kChoices = {
      {"model", {"gpt"}},
      {"n-layer", {"1", "2", "4", "48"}},
      {"n-head", {"1", "2", "4", "64"}},
      {"n-embd", {"8", "32", "64", "2048"}},
      {"block-size", {"1", "16", "64", "1024"}},
      {"dropout", {"0", "0.1", "0.5", "0.999"}},
      {"gelu", {"none", "tanh"}},
      {"dataset", {"text"}},
      {"data", {"/usr/share/common-licenses/GPL-3", "/nonexistent"}},
      {"batch-size", {"1", "4", "1024"}},
      {"world-size", {"1", "2", "3", "64"}},
      {"seed", {"0", "1337", "9223372036854775807"}},
      {"steps", {"0", "4", "1000000"}},
      {"no-sync", {"1", "2", "1024"}},
      {"eval-every", {"0", "1", "1000000"}},
      {"eval-iters", {"1", "2", "10000"}},
      {"optimizer", {"adamw"}},
      {"lr", {"0", "1e-3", "10"}},
      {"weight-decay", {"0", "0.1", "10"}},
      {"betas", {"0.9,0.95", "0,0", "0.999999,0.5"}},
      {"clip-grad-norm", {"0", "1", "1e9"}},
      {"aux-head-every", {"0", "1", "2", "1000000"}},
      {"zero-grad", {"none", "zeros"}},
      {"bucket-cap-mb", {"25", "1e-6", "0.01", "1e6"}},
      {"dump-params", {"/tmp/y.json"}},
  };
  const auto it = kChoices.find(name);
  if (it != kChoices.end()) return pick(rng, it->second);
  return pick(rng, std::vector<std::string>{"true", "false"});  // the booleans
}

TEST(Fuzz, GptFlagsEndInUsageErrorOrAConfig) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> names;
  for (const std::string& n : ddp::config_flag_names()) names.push_back(n);
  names.insert(names.end(), {"dump-params", "quiet"});
  const std::vector<std::string> kBadNames = {"", "n_layer", "N-LAYER", "-lr", "layers", "nproc", "threads"};
  Rng rng(kSeed + 2);
  constexpr int kCases = 20000;
  int refused = 0, accepted = 0, crashes = 0;
  for (int c = 0; c < kCases; ++c) {
    std::vector<std::string> args;
    const uint64_t nflags = pick(rng, 7);
    for (uint64_t i = 0; i < nflags; ++i) {
      const std::string name = pick(rng, 100) < 92 ? pick(rng, names) : pick(rng, kBadNames);
      const uint64_t how = pick(rng, 10);
      const std::string value = how < 6   ? valid_gpt_value(rng, name)
                                : how < 9 ? pick(rng, kBadValues)
                                          : mutate_value(rng, valid_gpt_value(rng, name));
      const uint64_t form = pick(rng, 20);
      if (form < 15) {
        args.push_back("--" + name);
        args.push_back(value);
      } else if (form < 18) {
        args.push_back("--" + name + "=" + value);
      } else if (form < 19) {
        args.push_back("--" + name);
      } else {
        args.push_back(value);
      }
    }
    std::string failure;
    bool was_accepted = false;
    g_largest = 0;
    try {
      const ddp::Config cfg = parse_like_gpt_sim(args);
      was_accepted = true;
      if (cfg.is_gpt() && !(cfg.gpt.n_embd % cfg.gpt.n_head == 0 && cfg.gpt.dropout < 1.0 &&
            !(cfg.static_graph && cfg.no_sync > 1))) {
        failure = "accepted a configuration the parser must refuse";
      }
      const std::vector<std::string> again = ddp::to_args(cfg);
      try {
        if (ddp::to_args(parse_like_gpt_sim(again)) != again) failure = "to_args does not read back the same";
      } catch (const std::exception& e) {
        failure = std::string("its own to_args is refused: ") + e.what();
      }
      ddp::describe(cfg);
    } catch (const UsageError& e) {
      if (std::string(e.what()).find('\n') != std::string::npos) failure = std::string("not one line: ") + e.what();
    } catch (const std::exception& e) {
      failure = std::string("another exception: ") + e.what();
    } catch (...) {
      failure = "a non-std exception";
    }
    if (g_largest > kMaxAlloc) failure += " allocation of " + std::to_string(g_largest.load()) + " bytes";
    if (failure.empty()) (was_accepted ? accepted : refused)++;
    if (!failure.empty()) {
      ++crashes;
      std::string line;
      for (const std::string& a : args) line += " [" + a.substr(0, 40) + "]";
      ADD_FAILURE() << "case " << c << ":" << line << ": " << failure;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz gpt flags: %d cases, %d refused cleanly, %d accepted, %d crashes (seed %llu, %.1f s)\n", kCases,
              refused, accepted, crashes, static_cast<unsigned long long>(kSeed + 2), secs);
  EXPECT_EQ(crashes, 0);
  EXPECT_GT(accepted, kCases / 20) << "too few cases get past the parser";
  EXPECT_GT(refused, kCases / 4);
}

// Each bad input the parser can see (the data file is read by the program: launch_hardening_test runs
// those), refused with the message that names the flag and its limit.
TEST(GptFlags, BadInputNamesTheFlagAndTheLimit) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--n-layer", "0"}, "--n-layer must be in [1, 48] (got 0)"},
      {{"--n-layer", "two"}, "--n-layer must be an integer (got 'two')"},
      {{"--n-head", "65"}, "--n-head must be in [1, 64] (got 65)"},
      {{"--n-embd", "30", "--n-head", "4"}, "--n-embd must be a multiple of --n-head (got 30 and 4)"},
      {{"--block-size", "0"}, "--block-size must be in [1, 1024] (got 0)"},
      {{"--dropout", "1"}, "--dropout must be in [0, 1) (got 1)"},
      {{"--dropout", "nan"}, "--dropout must be a finite number (got 'nan')"},
      {{"--bias", "yes"}, "--bias must be true or false (got 'yes')"},
      {{"--gelu", "relu"}, "--gelu must be one of none|tanh (got 'relu')"},
      {{"--dataset", "digits"}, "--model gpt trains on --dataset text (nanoGPT's get_batch)"},
      {{"--data", ""}, "--data must not be empty"},
      {{"--world-size", "65"}, "--world-size must be in [1, 64] (got 65)"},
      {{"--seed", "-1"}, "--seed must be in [0, 9223372036854775807] (got -1)"},
      {{"--no-sync", "0"}, "--no-sync must be in [1, 1048576] (got 0)"},
      {{"--eval-iters", "0"}, "--eval-iters must be in [1, 10000] (got 0)"},
      {{"--optimizer", "sgd"}, "--model gpt trains with --optimizer adamw (nanoGPT's)"},
      {{"--lr", "inf"}, "--lr must be a finite number (got 'inf')"},
      {{"--betas", "0.9"}, "--betas must be two numbers in [0, 1) as B1,B2 (got '0.9')"},
      {{"--betas", "0.9,1"}, "--betas must be two numbers in [0, 1) as B1,B2 (got '0.9,1')"},
      {{"--clip-grad-norm", "-1"}, "--clip-grad-norm must be in [0, 1000000000] (got -1)"},
      {{"--zero-grad", "all"}, "--zero-grad must be one of zeros|none (got 'all')"},
      {{"--bucket-cap-mb", "0"}, "--bucket-cap-mb must be in [1e-06, 1000000] (got 0)"},
      {{"--static-graph", "true", "--no-sync", "2"}, "--static-graph true with --no-sync 2: torch 1.13 fails"},
      {{"--static-graph", "true", "--aux-head-every", "2"}, "--static-graph true needs the same parameters"},
      {{"--n-layer", "48", "--n-embd", "2048", "--n-head", "1"},
       "parameters x replicas = 2417758208 x 2 = 4835516416 exceeds the ceiling of 268435456"},
      {{"--layers", "2,2"}, "--layers is a flag of the sequential models (mlp, cnn, a spec), not of --model gpt"},
      {{"--zero", "true", "--comm-hook", "fp16-compress", "--uneven", "1", "--join", "true", "--steps", "3"}, "accepted"},
      {{"--n-layer", "1", "extra"}, "unexpected argument 'extra'"},
  };
  for (const auto& [args, expect] : cases) {
    std::string what = "accepted";
    try {
      parse_like_gpt_sim(args);
    } catch (const UsageError& e) {
      what = e.what();
    }
    EXPECT_NE(what.find(expect), std::string::npos) << args[0] << ": " << what;
  }
  std::printf("gpt flags: %zu bad inputs, each refused with its message\n", cases.size());
}
}  // namespace
}  // namespace ddplab
