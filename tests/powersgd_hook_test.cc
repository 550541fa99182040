// src/ddp/hooks/powersgd.h against real torch 1.13 DDP with powerSGD_hook on gloo
// (tests/golden/powersgd/make_powersgd_goldens.py): each rank's recorded raw buckets go, step by step,
// through ddplab's hook on one thread per rank over comm::LocalGroup (the in-process Gloo ring), and every
// rank's averaged bucket must equal torch's bit for bit, vanilla iterations and compressed ones alike.
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "src/comm/local_group.h"
#include "src/ddp/hooks/powersgd.h"
#include "src/ddp/hooks/powersgd_math.h"
#include "src/base/errors.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::json;

const char* kDir = "tests/golden/powersgd/";

TEST(PowerSgd, NumpyRandintMatchesNumpy) {
  const json doc = testing::load_json(std::string(kDir) + "randint.json");
  for (const json& d : doc["draws"]) {
    ddp::powersgd::NumpyRandomState r(d["seed"].get<uint32_t>());
    std::vector<int64_t> got;
    for (size_t i = 0; i < d["values"].size(); ++i) got.push_back(r.randint(1000000000));
    const auto want = testing::ints(d["values"]);
    EXPECT_EQ(got, want) << "seed " << d["seed"];
    std::printf("RandomState(%lld).randint(1e9) x%zu: %s (first %lld)\n",
                static_cast<long long>(d["seed"].get<int64_t>()), want.size(), got == want ? "equal" : "DIFFER",
                static_cast<long long>(got[0]));
  }
}

struct Outcome {
  int64_t equal = 0, total = 0, worst = 0, plain_differ = 0;
  std::vector<std::string> sent;
};

// Runs one golden case through one hook per rank; compares every rank's every bucket.
Outcome run_case(const std::string& file) {
  const json doc = testing::load_json(std::string(kDir) + file);
  const int ws = doc["world_size"].get<int>();
  ddp::CommHookOptions o;
  o.name = "powersgd";
  o.powersgd_rank = doc["matrix_approximation_rank"].get<int64_t>();
  o.powersgd_start_iter = doc["start_powerSGD_iter"].get<int64_t>();
  const json& calls = doc["calls"];
  // got[r][c]: rank r's bucket after call c.
  std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(ws));
  std::vector<std::vector<std::string>> sent(static_cast<size_t>(ws));
  std::vector<std::string> errors(static_cast<size_t>(ws));
  comm::LocalGroup group(ws, collective::Algorithm::ring);
  std::vector<std::thread> threads;
  for (int r = 0; r < ws; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = group.communicator(r);
        auto hook = ddp::make_powersgd_hook(o);
        for (const json& c : calls) {
          std::vector<float> buf = testing::floats(c["raw"][static_cast<size_t>(r)]);
          ddp::GradBucket b;
          b.index = c["index"].get<size_t>();
          b.is_last = c["is_last"].get<bool>();
          b.buffer = buf.data();
          b.numel = buf.size();
          size_t off = 0;
          for (size_t p = 0; p < c["shapes"].size(); ++p) {
            b.offsets.push_back(off);
            b.shapes.push_back(c["shapes"][p].get<std::vector<int64_t>>());
            b.names.push_back(c["names"][p].get<std::string>());
            size_t numel = 1;
            for (int64_t d : b.shapes.back()) numel *= static_cast<size_t>(d);
            off += numel;
          }
          sent[static_cast<size_t>(r)].push_back(hook->run(b, *comm).sent);
          got[static_cast<size_t>(r)].push_back(std::move(buf));
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < ws; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  Outcome out;
  out.sent = sent[0];
  for (size_t c = 0; c < calls.size(); ++c) {
    const auto want = testing::floats(calls[c]["result"]);
    // What the built-in average (grad * float(1/ws), ring SUM: here the plain float sum order) would give
    // differs: the comparison can fail.
    std::vector<std::vector<float>> raw;
    for (int r = 0; r < ws; ++r) raw.push_back(testing::floats(calls[c]["raw"][static_cast<size_t>(r)]));
    for (int r = 0; r < ws; ++r) {
      if (got[static_cast<size_t>(r)].size() <= c) continue;
      const testing::Bits b = testing::bits(got[static_cast<size_t>(r)][c], want);
      out.equal += b.equal;
      out.total += static_cast<int64_t>(want.size());
      out.worst = std::max(out.worst, b.worst);
      if (!b.exact())
        ADD_FAILURE() << file << " call " << c << " (iteration " << calls[c]["iter"] << ") rank " << r << ": "
                      << b.equal << "/" << want.size() << " bitwise, max ulps " << b.worst;
    }
    std::vector<float> plain(want.size(), 0.0f);
    const float scale = static_cast<float>(1.0 / ws);
    for (size_t i = 0; i < want.size(); ++i) {
      float s = 0.0f;
      for (int r = 0; r < ws; ++r) s = s + raw[static_cast<size_t>(r)][i] * scale;
      plain[i] = s;
    }
    out.plain_differ += testing::bits(plain, want).total - testing::bits(plain, want).equal;
  }
  std::printf(
      "%-22s ws %d rank %lld: %lld/%lld values bitwise equal on every rank and step, max ulps %lld; "
      "a plain float32 average would differ in %lld\n",
      file.c_str(), ws, static_cast<long long>(o.powersgd_rank), static_cast<long long>(out.equal),
      static_cast<long long>(out.total), static_cast<long long>(out.worst), static_cast<long long>(out.plain_differ));
  for (size_t c = 0; c < out.sent.size(); ++c) std::printf("    call %zu sent %s\n", c, out.sent[c].c_str());
  return out;
}

class PowerSgdGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(PowerSgdGolden, EqualsTorchBitForBit) {
  const Outcome o = run_case(std::string(GetParam()) + ".json");
  EXPECT_GT(o.total, 0);
  EXPECT_EQ(o.equal, o.total);
  EXPECT_GT(o.plain_differ, 0);  // compression changes the numbers: the check above can fail
}

INSTANTIATE_TEST_SUITE_P(Cases, PowerSgdGolden,
                         ::testing::Values("mlp_rank1_ws2", "mlp_rank1_ws3", "mlp_rank2_ws2", "small_rank1_ws3",
                                           "small_rank2_ws2", "small_rank2_ws3"));

TEST(PowerSgd, RefusesWhatTorchCannotMatch) {
  ddp::CommHookOptions o;
  o.powersgd_rank = 3;
  try {
    ddp::make_powersgd_hook(o);
    FAIL() << "rank 3 accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--powersgd-rank must be 1 or 2 (got 3)"), std::string::npos) << e.what();
  }
  o.powersgd_rank = 1;
  o.powersgd_start_iter = 1;  // PowerSGDState's ValueError
  EXPECT_THROW(ddp::make_powersgd_hook(o), UsageError);
  o.powersgd_start_iter = 2;
  o.powersgd_random_seed = uint64_t{1} << 32;  // numpy's RandomState takes 32 bits
  EXPECT_THROW(ddp::make_powersgd_hook(o), UsageError);
  o.powersgd_random_seed = 0;
  auto hook = ddp::make_powersgd_hook(o);
  // A 0-dimensional parameter, once compression starts (the first two iterations are plain all-reduces).
  comm::LocalGroup group(1, collective::Algorithm::ring);
  auto comm = group.communicator(0);
  float x[2] = {1, 2};
  ddp::GradBucket b;
  b.is_last = true;
  b.buffer = x;
  b.numel = 2;
  b.offsets = {0, 1};
  b.shapes = {{1}, {}};
  b.names = {"w", "scale"};
  hook->run(b, *comm);
  hook->run(b, *comm);
  try {
    hook->run(b, *comm);
    FAIL() << "0-dimensional parameter accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter scale is 0-dimensional"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddplab
