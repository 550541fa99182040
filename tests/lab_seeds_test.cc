// What the notebook labs say about PyTorch's seeds (notebooks_ported/lab/seeding.h), and --notebook-seeding:
// the statements checked against torch itself (fresh_seeds.py), every rank's own seed and data with the
// weights still equal, the lab's runs replayed in PyTorch from the seeds it printed, lab 004's --dump of
// every rank, and no output or document repeating the old claim that a fresh process starts from a fixed seed.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::CommandResult;
using testing::json;

constexpr const char* kFixedSeedNote = "This lab fixes a seed the notebook does not: 67280421310721";

CommandResult lab(const std::string& name, std::vector<std::string> args) {
  args.insert(args.begin(), "notebooks_ported/" + name + "/" + name);
  return testing::run_command(args);
}

// Runs the lab with --dump into a fresh directory; returns the dump and (in *out) what it printed.
json lab_dump(const std::string& name, std::vector<std::string> args, CommandResult* out = nullptr) {
  const std::string path = testing::temp_dir() + "/dump.json";
  args.insert(args.end(), {"--dump", path});
  const CommandResult r = lab(name, args);
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  if (out) *out = r;
  return testing::load_json(path);
}

std::vector<float> values(const json& params, const std::vector<std::string>& names) {
  std::vector<float> out;
  for (const auto& n : names) {
    const auto f = testing::floats(params.at(n));
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// Every rank's seed differs, its initial parameters differ from rank 0's, and its final ones are rank 0's
// bit for bit: what --notebook-seeding must show, in the lab's dump and in torch's.
void expect_own_seeds_same_weights(const std::string& label, const json& ranks, const std::vector<std::string>& ours) {
  std::set<uint64_t> seeds;
  for (const auto& r : ranks) seeds.insert(r["seed"].get<uint64_t>());
  EXPECT_EQ(seeds.size(), ranks.size()) << label << ": every rank its own seed";
  const auto init0 = values(ranks[0]["initial"], ours), final0 = values(ranks[0]["params"], ours);
  for (size_t k = 1; k < ranks.size(); ++k) {
    const auto init = testing::match(label + " initial rank" + std::to_string(k) + " vs rank 0",
                                     values(ranks[k]["initial"], ours), init0);
    EXPECT_LT(init.equal, init.total) << label << ": rank " << k << " built its own model";
    const auto fin = testing::match(label + " final rank" + std::to_string(k) + " vs rank 0",
                                    values(ranks[k]["params"], ours), final0);
    EXPECT_EQ(fin.equal, fin.total) << label << ": DDP keeps the weights equal";
  }
}

std::string seeds_arg(const json& ranks) {
  std::string s;
  for (const auto& r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r["seed"].get<uint64_t>());
  return s;
}

TEST(LabSeeds, FreshSeedsScriptHoldsAgainstTorch) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: fresh_seeds.py skipped";
  const CommandResult r = testing::run_command({"/usr/bin/python3", "notebooks_ported/lab/fresh_seeds.py"});
  std::printf("%s", r.out.c_str());
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_FALSE(contains(r.out, "FAILED")) << r.out;
  EXPECT_TRUE(contains(r.out, "ok: three fresh processes started from three seeds")) << r.out;
  EXPECT_TRUE(contains(r.out, "ok: after DDP(model) every rank holds rank 0's parameters, bitwise")) << r.out;
}

// The labs fix a seed the notebook does not, and say so; they never say a fresh process starts from one.
TEST(LabSeeds, LabsSayTheyFixASeedAndNeverClaimAFreshProcessHasOne) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {"001_toy_ddp", {}},
      {"002_checkpoint", {}},
      {"002_checkpoint", {"--notebook-seeding"}},
      {"003_trainer", {"--max-epochs", "1"}},
      {"003_trainer", {"--max-epochs", "1", "--world-size", "2", "--notebook-seeding"}},
      {"004_parallelism", {}},
      {"004_parallelism", {"--notebook-seeding"}},
      {"002_checkpoint", {"--help"}},
      {"003_trainer", {"--help"}},
      {"004_parallelism", {"--help"}},
  };
  for (const auto& [name, args] : runs) {
    const CommandResult r = lab(name, args);
    EXPECT_EQ(r.status, 0) << name << r.err;
    const std::string all = r.out + r.err;
    for (const char* claim : {"default seed", "fresh process starts from", "fresh process: torch"}) {
      EXPECT_FALSE(contains(all, claim)) << name << " says '" << claim << "':\n" << all;
    }
    const bool seeded_as_notebook = std::find(args.begin(), args.end(), "--notebook-seeding") != args.end();
    const bool help = std::find(args.begin(), args.end(), "--help") != args.end();
    const bool fixed = name != "001_toy_ddp" && !seeded_as_notebook && !help;
    EXPECT_EQ(contains(all, kFixedSeedNote), fixed) << name << ":\n" << all;
  }
}

// The documents that described these labs, and the reference scripts' comments.
TEST(LabSeeds, NoDocumentRepeatsTheFalseClaim) {
  for (const char* path : {"README.md", "notebooks_ported/README.md", "notebooks_ported/001_toy_ddp/reference.py",
                           "notebooks_ported/002_checkpoint/reference.py", "notebooks_ported/003_trainer/reference.py",
                           "notebooks_ported/004_parallelism/reference.py", "tests/read_checkpoint.py"}) {
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path;
    std::stringstream text;
    text << in.rdbuf();
    for (const char* claim : {"default seed", "fresh process starts from", "fresh process's default",
                              "what a fresh process starts", "Like a fresh process"}) {
      EXPECT_FALSE(contains(text.str(), claim)) << path << " says '" << claim << "'";
    }
  }
}

TEST(LabSeeds, Lab003NotebookSeedingGivesEveryRankItsOwnDatasetYetEqualWeights) {
  CommandResult r;
  const json got = lab_dump("003_trainer", {"--world-size", "3", "--max-epochs", "1", "--notebook-seeding"}, &r);
  ASSERT_EQ(got["ranks"].size(), 3u);
  for (int k = 0; k < 3; ++k) {
    const std::string line =
        "[rank" + std::to_string(k) + "] seed " + std::to_string(got["ranks"][k]["seed"].get<uint64_t>()) + " (its own";
    EXPECT_TRUE(contains(r.out, line)) << line << "\n" << r.out;
  }
  for (const char* row :
       {"rank 2 MyTrainDataset | exact: False | approximate: False", "rank 2 Linear before DDP | exact: False",
        "rank 2 after training | exact: True", "DDP(model) broadcasts rank 0's parameters to every rank",
        "trained on 3 different\nrandom datasets"}) {
    EXPECT_TRUE(contains(r.out, row)) << row << "\n" << r.out;
  }
  const std::vector<std::string> ours = {"layers.0.weight", "layers.0.bias"};
  expect_own_seeds_same_weights("lab 003", got["ranks"], ours);
  // Two runs draw two sets of seeds, as two runs of the notebook do.
  const json again = lab_dump("003_trainer", {"--world-size", "3", "--max-epochs", "1", "--notebook-seeding"});
  EXPECT_NE(seeds_arg(got["ranks"]), seeds_arg(again["ranks"]));

  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: replay in PyTorch skipped";
  const std::string dir = testing::temp_dir();
  // PyTorch with the seeds the lab printed: every rank's numbers, initial weights bit for bit.
  const CommandResult py =
      testing::run_command({"/usr/bin/python3", "notebooks_ported/003_trainer/reference.py", "--world-size", "3",
                            "--max-epochs", "1", "--rank-seeds", seeds_arg(got["ranks"]), "--dump", dir + "/r.json"});
  ASSERT_EQ(py.status, 0) << py.err;
  const json want = testing::load_json(dir + "/r.json");
  for (int k = 0; k < 3; ++k) {
    const json &g = got["ranks"][k], &w = want["ranks"][k];
    EXPECT_EQ(g["seed"].get<uint64_t>(), w["seed"].get<uint64_t>());
    const std::string rk = " rank" + std::to_string(k);
    const auto init =
        testing::match("003 replay initial" + rk, values(g["initial"], ours), values(w["initial"], {"weight", "bias"}));
    EXPECT_EQ(init.equal, init.total);
    EXPECT_TRUE(testing::match("003 replay final" + rk, values(g["params"], ours),
                               values(w["params"], {"weight", "bias"}), 1.3e-6, 1e-5)
                    .allclose);
    EXPECT_TRUE(
        testing::match("003 replay losses" + rk, testing::floats(g["losses"]), testing::floats(w["losses"]), 1e-4, 1e-7)
            .allclose);
  }
  // PyTorch seeded as the notebook (not at all): its own seeds per rank, and the same final weights.
  const CommandResult py2 =
      testing::run_command({"/usr/bin/python3", "notebooks_ported/003_trainer/reference.py", "--world-size", "3",
                            "--max-epochs", "1", "--notebook-seeding", "--dump", dir + "/n.json"});
  ASSERT_EQ(py2.status, 0) << py2.err;
  expect_own_seeds_same_weights("torch 003 unseeded", testing::load_json(dir + "/n.json")["ranks"], {"weight", "bias"});
}

TEST(LabSeeds, Lab004DumpsEveryRanksParametersAndNotebookSeedingShowsTheBroadcast) {
  const std::vector<std::string> ours = {"net1.weight", "net1.bias", "net2.weight", "net2.bias"};
  CommandResult fixed;
  const json a = lab_dump("004_parallelism", {"--part", "ddp", "--world-size", "3"}, &fixed);
  ASSERT_EQ(a["ddp"]["world_size"], 3);
  ASSERT_EQ(a["ddp"]["ranks"].size(), 3u);
  for (const auto& r : a["ddp"]["ranks"]) {
    EXPECT_EQ(r["seed"].get<uint64_t>(), 67280421310721u);
    EXPECT_EQ(values(r["params"], ours), values(a["ddp"]["ranks"][0]["params"], ours));
    EXPECT_EQ(r["loss"], a["ddp"]["ranks"][0]["loss"]) << "seeded alike: the same batch on every rank";
  }
  EXPECT_TRUE(contains(fixed.out, kFixedSeedNote)) << fixed.out;

  CommandResult r;
  const json b = lab_dump("004_parallelism", {"--part", "ddp", "--world-size", "3", "--notebook-seeding"}, &r);
  ASSERT_EQ(b["ddp"]["ranks"].size(), 3u);
  expect_own_seeds_same_weights("lab 004", b["ddp"]["ranks"], ours);
  for (const char* row : {"rank 1 batch x", "rank 2 batch x  | exact: False | approximate: False",
                          "rank 2 model before DDP() | exact: False", "rank 2 after the step | exact: True",
                          "DDP(model) broadcasts rank 0's parameters to every rank"}) {
    EXPECT_TRUE(contains(r.out, row)) << row << "\n" << r.out;
  }
  EXPECT_NE(b["ddp"]["ranks"][1]["loss"], b["ddp"]["ranks"][0]["loss"]) << "each rank its own batch";

  // Real Gloo ranks: rank 0's process writes every rank's parameters.
  const json c = lab_dump("004_parallelism", {"--part", "ddp", "--backend", "gloo", "--nproc", "2"});
  ASSERT_EQ(c["ddp"]["ranks"].size(), 2u);
  EXPECT_EQ(values(c["ddp"]["ranks"][1]["params"], ours).size(), 165u);
  EXPECT_EQ(values(c["ddp"]["ranks"][1]["params"], ours), values(c["ddp"]["ranks"][0]["params"], ours));

  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: PyTorch's DDP skipped";
  const std::string dir = testing::temp_dir();
  const auto compare = [&](const std::string& label, const json& got, const json& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      const std::string rk = " rank" + std::to_string(k);
      EXPECT_EQ(got[k]["seed"].get<uint64_t>(), want[k]["seed"].get<uint64_t>());
      const auto init =
          testing::match(label + " initial" + rk, values(got[k]["initial"], ours), values(want[k]["initial"], ours));
      EXPECT_EQ(init.equal, init.total) << "ToyModel from the same seed must be bit-exact";
      EXPECT_TRUE(testing::match(label + " final" + rk, values(got[k]["params"], ours), values(want[k]["params"], ours),
                                 1.3e-6, 1e-5)
                      .allclose);
      EXPECT_NEAR(got[k]["loss"].get<double>(), want[k]["loss"].get<double>(), 1e-6) << label << rk;
    }
  };
  for (const auto& [label, args, got] :
       {std::tuple<std::string, std::vector<std::string>, json>{"004 ddp seeded", {"--ddp"}, a},
        {"004 ddp replay", {"--rank-seeds", seeds_arg(b["ddp"]["ranks"])}, b}}) {
    std::vector<std::string> cmd = {"/usr/bin/python3", "notebooks_ported/004_parallelism/reference.py",
                                    "--world-size",     "3",
                                    "--dump",           dir + "/r.json"};
    cmd.insert(cmd.end(), args.begin(), args.end());
    const CommandResult py = testing::run_command(cmd);
    ASSERT_EQ(py.status, 0) << py.err;
    compare(label, got["ddp"]["ranks"], testing::load_json(dir + "/r.json")["ddp"]["ranks"]);
  }
  const CommandResult py = testing::run_command({"/usr/bin/python3", "notebooks_ported/004_parallelism/reference.py",
                                                 "--world-size", "3", "--notebook-seeding", "--dump", dir + "/n.json"});
  ASSERT_EQ(py.status, 0) << py.err;
  expect_own_seeds_same_weights("torch 004 unseeded", testing::load_json(dir + "/n.json")["ddp"]["ranks"], ours);
}

TEST(LabSeeds, Lab002NotebookSeeding) {
  const CommandResult r = lab("002_checkpoint", {"--world-size", "3", "--notebook-seeding"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* row : {"[rank2] seed ", "[rank2] checkpoint vs own parameters:\nmodule.net.weight | exact: True",
                          "rank 2 model before DDP() | exact: False", "rank 2 batch x",
                          "rank 2 after the step | exact: True", "saving on rank 0 alone is enough"}) {
    EXPECT_TRUE(contains(r.out, row)) << row << "\n" << r.out;
  }
  const CommandResult g = lab("002_checkpoint", {"--backend", "gloo", "--nproc", "2", "--notebook-seeding"});
  EXPECT_EQ(g.status, 0) << g.err;
  EXPECT_TRUE(contains(g.out, "rank 1 after the step | exact: True")) << g.out;
}

TEST(LabSeeds, NotebookSeedingWhereItCannotTakeEffectIsRefused) {
  const std::vector<std::tuple<std::string, std::vector<std::string>, std::string>> cases = {
      {"004_parallelism",
       {"--part", "tensor", "--notebook-seeding"},
       "--notebook-seeding changes only the DDP basic part: use it with --part ddp or all (got --part tensor)"},
      {"002_checkpoint",
       {"--load", "x.safetensors", "--notebook-seeding"},
       "--notebook-seeding: --load only reads a checkpoint; it draws nothing"},
      {"003_trainer", {"--notebook-seeding", "maybe"}, "--notebook-seeding"},
  };
  for (const auto& [which, args, expect] : cases) {
    const CommandResult r = lab(which, args);
    EXPECT_EQ(r.status, 2) << which << r.out;
    EXPECT_TRUE(contains(r.err, expect)) << which << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace ddplab
