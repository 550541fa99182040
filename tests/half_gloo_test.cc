// The Gloo communicator's 16-bit all_reduce (src/gloo/gloo_comm.cc: gloo::float16, gloo::sum<gloo::float16>,
// the ring) against torch 1.13's dist.all_reduce of float16 tensors over Gloo (tests/golden/half/gloo_fp16.json),
// ranks as threads meeting through a file store over loopback TCP; bfloat16 refused with torch's words.
#include <thread>

#include <gtest/gtest.h>

#include "src/gloo/gloo_comm.h"
#include "src/store/open_store.h"
#include "tests/half_test.h"

namespace ddplab {
namespace {

using testing::json;

// Runs f(communicator) on ws ranks, one thread each, over Gloo; every rank opens the store on its own.
template <typename F>
void on_gloo_ranks(int ws, const std::string& run_id, F f) {
  const dist::StoreSpec spec = dist::parse_store("file:" + testing::temp_dir());
  std::vector<std::thread> ts;
  for (int r = 0; r < ws; ++r) {
    ts.emplace_back([&, r] {
      auto comm = dist::connect_gloo(dist::open_store(spec, run_id), r, ws, "127.0.0.1", std::chrono::seconds(60));
      f(*comm);
    });
  }
  for (auto& t : ts) t.join();
}

TEST(GlooHalf, AllReduceEqualsTorchOverGloo) {
  const json doc = testing::load_json("tests/golden/half/gloo_fp16.json");
  for (const json& c : doc["cases"]) {
    const int ws = c["ws"].get<int>();
    const size_t n = c["n"].get<size_t>();
    std::vector<std::vector<Half>> d;
    for (size_t r = 0; r < static_cast<size_t>(ws); ++r) {
      d.push_back(testing::golden_input(doc, c, r));
      ASSERT_EQ(std::to_string(testing::fnv1a16(d[r])), c["input_fnv1a"][r].get<std::string>()) << "rank " << r;
    }
    on_gloo_ranks(ws, "half" + std::to_string(ws) + "_" + std::to_string(n), [&](comm::Communicator& comm) {
      comm.all_reduce(d[static_cast<size_t>(comm.rank())].data(), n, comm::ReduceOp::sum);
    });
    const std::string label = "GlooComm<Half> ws " + std::to_string(ws) + " n " + std::to_string(n) + " vs torch";
    EXPECT_TRUE(testing::matches_golden(label, d[0], c));
    for (size_t r = 1; r < d.size(); ++r) EXPECT_EQ(testing::bits_of(d[r]), testing::bits_of(d[0])) << "rank " << r;
  }
}

TEST(GlooHalf, BFloat16IsRefusedAsTorchRefusesIt) {
  const json doc = testing::load_json("tests/golden/half/gloo_fp16.json");
  const std::string torch_error = doc["bfloat16_error"].get<std::string>();  // "RuntimeError: Invalid scalar type"
  const std::string words = torch_error.substr(torch_error.find(": ") + 2);
  std::vector<std::string> errors(2);
  on_gloo_ranks(2, "bf16", [&](comm::Communicator& comm) {
    BFloat16 x = to_bfloat16(1.0f);
    try {
      comm.all_reduce(&x, 1, comm::ReduceOp::sum);
    } catch (const comm::CommError& e) {
      errors[static_cast<size_t>(comm.rank())] = e.what();
    }
    float one = 1.0f;  // the communicator is still usable: the refusal sent nothing
    comm.all_reduce(&one, 1, comm::ReduceOp::sum);
    EXPECT_EQ(one, 2.0f);
  });
  for (const std::string& e : errors) {
    std::printf("torch: \"%s\"; ddplab: \"%s\"\n", torch_error.c_str(), e.c_str());
    EXPECT_NE(e.find(words), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace ddplab
