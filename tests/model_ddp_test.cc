// Models beyond the MLP under DDP (issue 16): //sim:ddp_sim on the CNN and the digits against real torch
// DistributedDataParallel on gloo (tests/golden/models/, written by make_model_goldens.py from
// sim/ddp_reference.py), bit for bit: every rank's parameters and BatchNorm buffers, every loss, the sampler's
// indices and the test predictions. The kernels are pinned in tests/BUILD as the generator pins them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::expect_bitwise;
using testing::json;
using testing::sim_dump;

// The line of `text` that starts at the first `start`.
std::string line_with(const std::string& text, const std::string& start) {
  const size_t at = text.find(start);
  return at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
}

std::string fmt_pct(int64_t correct) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", 100.0 * static_cast<double>(correct) / 297.0);
  return buf;
}

TEST(ModelDdp, CnnOnDigitsIsBitwiseTorchDdp) {
  const json configs = testing::load_json("tests/golden/models/configs.json");
  ASSERT_GE(configs.size(), 6u);
  for (const auto& [name, args] : configs.items()) {
    const json sim = sim_dump(args.get<std::vector<std::string>>());
    const json torch = testing::load_json("tests/golden/models/" + name + ".json");
    testing::expect_dump_bitwise(name, sim, torch);
  }
}

// What the goldens teach, checked on torch's own numbers: with broadcast_buffers (DDP's default) the ranks'
// buffers agree once DDP(model).eval() has broadcast them; without it they differ while the parameters
// still agree; and Dropout seeded per rank still leaves the parameters equal (the all-reduce).
TEST(ModelDdp, GoldensShowWhatDdpDoesToBuffersAndDropout) {
  const json bb = testing::load_json("tests/golden/models/cnn_sgd_ws3.json");
  const json no_bb = testing::load_json("tests/golden/models/cnn_no_broadcast_buffers_ws3.json");
  const json per_rank = testing::load_json("tests/golden/models/cnn_seed_per_rank_ws2.json");
  for (size_t r = 1; r < 3; ++r) {
    EXPECT_EQ(bb["buffers"][r], bb["buffers"][0]);
    EXPECT_EQ(no_bb["replicas"][r], no_bb["replicas"][0]);
    EXPECT_NE(no_bb["buffers"][r]["1.running_mean"], no_bb["buffers"][0]["1.running_mean"]);
  }
  EXPECT_EQ(per_rank["replicas"][1], per_rank["replicas"][0]);
}

// Real ranks over Gloo (one process each) train the CNN to torch's bits too: parameters, losses, BatchNorm
// buffers and test predictions, with and without broadcast_buffers and with --seed-per-rank (Dropout's masks);
// the dump is ddp_sim's, key for key; the cmp table says whether the ranks' buffers agree.
TEST(ModelDdp, GlooRanksTrainTheCnnToTorchsBits) {
  const json configs = testing::load_json("tests/golden/models/configs.json");
  for (const auto& [name, nproc] : std::vector<std::pair<std::string, size_t>>{
           {"cnn_sgd_ws3", 3}, {"cnn_no_broadcast_buffers_ws3", 3}, {"cnn_seed_per_rank_ws2", 2}}) {
    const auto config = configs[name].get<std::vector<std::string>>();
    std::vector<std::string> args = {"verify/ddp_verify", "--backend",           "gloo",
                                     "--nproc",           std::to_string(nproc), "--quiet"};
    args.insert(args.end(), config.begin(), config.end());
    const std::string out = testing::temp_dir() + "/verify.json";
    args.push_back("--dump-params");
    args.push_back(out);
    const testing::CommandResult r = testing::run_command(args);
    ASSERT_EQ(r.status, 0) << name << ": " << r.err;
    EXPECT_NE(r.out.find("verified"), std::string::npos) << r.out;
    const json got = testing::load_json(out), torch = testing::load_json("tests/golden/models/" + name + ".json");
    ASSERT_EQ(got["buffers"].size(), nproc) << name << ": the dump has no buffers per rank";
    for (size_t rank = 0; rank < nproc; ++rank) {
      const std::string label = name + " gloo rank" + std::to_string(rank);
      expect_bitwise(label, got["replicas"][rank], torch["replicas"][rank]);
      expect_bitwise(label + " buffer", got["buffers"][rank], torch["buffers"][rank]);
      EXPECT_EQ(got["losses"][rank], torch["losses"][rank]) << label;
    }
    EXPECT_EQ(got["test_correct"], torch["test_correct"]) << name << ": test predictions differ from torch's";
    // ddp_sim's dump of the same run: the same keys and values (ddp_verify adds "backend" only).
    json sim = sim_dump(config), real = got;
    EXPECT_EQ(real["backend"], "gloo");
    real.erase("backend");
    EXPECT_EQ(real, sim) << name << ": ddp_verify's dump is not ddp_sim's";
    // Rank vs rank 0 in the dump: with the broadcast every buffer is rank 0's, without it the running
    // statistics differ (and num_batches_tracked, a count of the same steps, does not).
    const bool broadcast = name != "cnn_no_broadcast_buffers_ws3";
    const size_t last = nproc - 1;
    for (const auto& [buffer, v0] : got["buffers"][0].items()) {
      const auto m = testing::match(name + " rank " + std::to_string(last) + " vs 0 " + buffer,
                                    testing::floats(got["buffers"][last][buffer]), testing::floats(v0));
      const bool counter = buffer.find("num_batches_tracked") != std::string::npos;
      EXPECT_EQ(m.equal == m.total, broadcast || counter)
          << name << " " << buffer << ": " << m.equal << " of " << m.total << " equal";
    }
    // The table of the last real rank against rank 0 says the same: parameters equal either way.
    const std::string table = r.out.substr(r.out.find("# real rank " + std::to_string(last) + " vs real rank 0"));
    for (const char* buffer : {"1.running_mean ", "1.running_var  ", "5.running_mean ", "5.running_var  "}) {
      const std::string row = line_with(table, buffer);
      EXPECT_NE(row.find(broadcast ? "| exact: True " : "| exact: False"), std::string::npos) << name << ": " << row;
    }
    EXPECT_NE(line_with(table, "12.weight").find("| exact: True "), std::string::npos) << table;
    EXPECT_NE(r.out.find(broadcast ? "every rank's buffers equal rank 0's: broadcast_buffers=True"
                                   : "ranks differ from rank 0 in their buffers only: with --broadcast-buffers false"),
              std::string::npos)
        << r.out;
    // The accuracy table: each real rank's count, and the simulator's beside it, torch's.
    for (size_t rank = 0; rank < nproc; ++rank) {
      const int64_t c = torch["test_correct"][rank].get<int64_t>();
      EXPECT_NE(line_with(r.out, "rank " + std::to_string(rank) + ": ")
                    .find(std::to_string(c) + "/297 (" + fmt_pct(c) + "%) | simulator: " + std::to_string(c) + "/297"),
                std::string::npos)
          << r.out;
    }
    std::printf("%s: ddp_verify's parameters, buffers, losses and test predictions are torch's and ddp_sim's\n",
                name.c_str());
  }
}

// Lab 005 prints three lessons; each verdict is also what torch's own run (reference.py) prints.
TEST(ModelDdp, Lab005ShowsBuffersMasksAndAccuracy) {
  const auto r = testing::run_command({"notebooks_ported/005_cnn_digits/005_cnn_digits"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::printf("%s", r.out.c_str());
  EXPECT_NE(r.out.find("broadcast_buffers=True (DDP's default): parameters exact: True | buffers exact: True"),
            std::string::npos);
  EXPECT_NE(r.out.find("broadcast_buffers=False: parameters exact: True | buffers exact: False"), std::string::npos);
  EXPECT_NE(line_with(r.out, "every rank manual_seed(seed)").find("| 0 of 896 mask elements differ"),
            std::string::npos);
  EXPECT_EQ(line_with(r.out, "--seed-per-rank").find("| 0 of"), std::string::npos);
  EXPECT_EQ(r.out.find("parameters exact across ranks: False"), std::string::npos);
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: reference.py not run";
  const auto torch = testing::run_command({"/usr/bin/python3", "notebooks_ported/005_cnn_digits/reference.py"});
  ASSERT_EQ(torch.status, 0) << torch.err;
  std::printf("reference.py (torch 1.13 DDP, 2 gloo processes):\n%s", torch.out.c_str());
  EXPECT_NE(torch.out.find("broadcast_buffers=True: parameters exact: True | buffers exact: True"), std::string::npos);
  EXPECT_NE(torch.out.find("broadcast_buffers=False: parameters exact: True | buffers exact: False"),
            std::string::npos);
  // The same masks, element for element: torch's "X of N" differing elements are the lab's.
  const auto of_count = [](const std::string& line) {
    const size_t of = line.find(" of ");
    if (of == std::string::npos) return std::string("?");
    const size_t start = line.rfind(' ', of - 1) + 1, end = line.find(' ', of + 4);
    return line.substr(start, end - start);
  };
  EXPECT_EQ(of_count(line_with(torch.out, "masks seed_per_rank=False")),
            of_count(line_with(r.out, "every rank manual_seed(seed)")));
  EXPECT_EQ(of_count(line_with(torch.out, "masks seed_per_rank=True")), of_count(line_with(r.out, "--seed-per-rank")));
  EXPECT_NE(torch.out.find("syncbn: ValueError"), std::string::npos)
      << "SyncBatchNorm ran on CPU: lab 005 says it does not";
}

// What the lab says of masks, buffers and SyncBatchNorm at a world size and a torch its own run does not use:
// torch 2.x at 3 ranks (every rank against rank 0).
TEST(ModelDdp, Lab005ClaimsHoldAtThreeRanksOnTorch2) {
  DDPLAB_SKIP_UNLESS_TORCH("torch2");
  const auto torch = testing::run_command(
      {testing::torch2_python(), "-W", "ignore", "notebooks_ported/005_cnn_digits/reference.py", "--world-size", "3"});
  ASSERT_EQ(torch.status, 0) << torch.err;
  std::printf("reference.py (torch 2.x DDP, 3 gloo processes):\n%s", torch.out.c_str());
  EXPECT_NE(torch.out.find("broadcast_buffers=True: parameters exact: True | buffers exact: True"), std::string::npos);
  EXPECT_NE(torch.out.find("broadcast_buffers=False: parameters exact: True | buffers exact: False"),
            std::string::npos);
  EXPECT_NE(line_with(torch.out, "masks seed_per_rank=False").find(": 0 of "), std::string::npos) << torch.out;
  EXPECT_EQ(line_with(torch.out, "masks seed_per_rank=True").find(": 0 of "), std::string::npos) << torch.out;
  EXPECT_NE(line_with(torch.out, "masks seed_per_rank=True").find("parameters exact: True"), std::string::npos);
  EXPECT_NE(torch.out.find("syncbn: ValueError"), std::string::npos)
      << "SyncBatchNorm trained on CPU under torch 2.x: lab 005 says it does not";
}

TEST(ModelDdp, BadModelSpecGetsOneLineAndExit2) {
  const auto nccl = testing::run_command(
      {"verify/ddp_verify", "--backend", "nccl", "--compute", "device", "--nproc", "2", "--dataset", "digits", "--model",
       "cnn"});  // --compute host (the default) runs the CNN on NCCL; the device trainer does not
  EXPECT_EQ(nccl.status, 2) << nccl.err;
  EXPECT_NE(nccl.err.find("for Linear and ReLU layers only (got layer \"0\": Conv2d(1, 8, kernel_size=(3, 3)"),
            std::string::npos)
      << nccl.err;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"conv2d(1,8,3),batchnorm2d(4)", "layer 2 ('batchnorm2d(4)')"},
      {"conv2d(1,8)", "conv2d needs kernel_size"},
      {"unused_linear(0,4),flatten,linear(64,10)",
       "layer 1 ('unused_linear(0,4)'): expected in_features and out_features of at least 1, got (0, 4)"},
      {"linear(64,10", "unbalanced '('"},
      {"conv2d(1,8,3,bias=maybe)", "a number for bias"},
      {"flatten,softmax", "layer 2 ('softmax'): expected a layer"},
      {"flatten,linear(64,7)", "needs 10"},
  };
  for (const auto& [spec, want] : cases) {
    const auto r = testing::run_command({"sim/ddp_sim", "--dataset", "digits", "--model", spec, "--quiet"});
    EXPECT_EQ(r.status, 2) << spec;
    EXPECT_NE(r.err.find(want), std::string::npos) << spec << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace ddplab
