// TextData (nanoGPT's byte-level data and get_batch) and Generator::randint against torch 1.13
// (tests/golden/gpt_train/randint.json, text_data.json, made by make_gpt_train_goldens.py).
#include "src/data/text_data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "src/base/errors.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using testing::ints;
using testing::json;
using testing::load_json;

std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Randint, MatchesTorchOnBothSidesOfTheDrawWidth) {
  // ranges < 2^32 take one 32-bit draw per element, larger ones a 64-bit draw: the golden's highs straddle
  // 2^28 (where later torch versions switch) and 2^32 (where 1.13 does).
  int equal = 0, total = 0;
  const json golden = load_json("tests/golden/gpt_train/randint.json");
  for (const auto& c : golden["cases"]) {
    Generator g(c["seed"].get<uint64_t>());
    const int64_t high = c["high"];
    std::vector<int64_t> got = g.randint(high, 7);
    const std::vector<int64_t> more = g.randint(high, 3);
    got.insert(got.end(), more.begin(), more.end());
    const auto want = ints(c["values"]);
    EXPECT_EQ(got, want) << "seed " << c["seed"] << " high " << high;
    ++total;
    equal += got == want;
  }
  std::printf("randint: %d/%d cases (10 draws each) equal to torch.randint\n", equal, total);
  EXPECT_EQ(total, 3 * 16);
}

TEST(Randint, RefusesAnEmptyRange) { EXPECT_THROW(Generator(1).randint(0, 1), std::invalid_argument); }

// Everything the golden recorded about one text: vocabulary, split sizes, token sums and ends, decode, and
// each get_batch draw (ix through x, y) in call order from one generator.
void check_text(const TextData& d, const json& c) {
  std::vector<int> vocab;
  for (const char b : d.vocab()) vocab.push_back(static_cast<unsigned char>(b));
  EXPECT_EQ(vocab, c["vocab"].get<std::vector<int>>());
  const auto& train = d.tokens(Split::kTrain);
  const auto& val = d.tokens(Split::kVal);
  ASSERT_EQ(static_cast<int64_t>(train.size()), c["n_train"].get<int64_t>());
  ASSERT_EQ(static_cast<int64_t>(val.size()), c["n_val"].get<int64_t>());
  int64_t train_sum = 0, val_sum = 0;
  for (const int64_t t : train) train_sum += t;
  for (const int64_t t : val) val_sum += t;
  EXPECT_EQ(train_sum, c["train_sum"].get<int64_t>());
  EXPECT_EQ(val_sum, c["val_sum"].get<int64_t>());
  const auto head = [](const std::vector<int64_t>& v) {  // Python's v[:32]
    return std::vector<int64_t>(v.begin(), v.begin() + std::min<ptrdiff_t>(32, v.size()));
  };
  EXPECT_EQ(head(train), ints(c["train_head"]));
  EXPECT_EQ(head(val), ints(c["val_head"]));
  EXPECT_EQ(std::vector<int64_t>(val.end() - std::min<ptrdiff_t>(32, val.size()), val.end()), ints(c["val_tail"]));
  EXPECT_EQ(d.decode(ints(c["val_head"])), unhex(c["decoded_val_head"]));
  EXPECT_EQ(d.encode(d.decode(ints(c["val_head"]))), ints(c["val_head"]));
  int batches = 0, equal = 0;
  for (const auto& run : c["runs"]) {
    Generator g(run["seed"].get<uint64_t>());
    for (const auto& call : run["calls"]) {
      const Split split = call["split"] == "train" ? Split::kTrain : Split::kVal;
      const int64_t B = call["batch_size"], T = call["block_size"];
      const Batch b = d.get_batch(split, g, B, T);
      std::vector<int64_t> want_x, want_y;
      for (const auto& row : call["x"])
        for (const auto& v : row) want_x.push_back(v);
      for (const auto& row : call["y"])
        for (const auto& v : row) want_y.push_back(v);
      EXPECT_EQ(b.batch_size, B);
      EXPECT_EQ(b.block_size, T);
      EXPECT_EQ(b.x, want_x) << c["name"] << " seed " << run["seed"] << " " << call["split"] << " B " << B;
      EXPECT_EQ(b.y, want_y) << c["name"] << " seed " << run["seed"] << " " << call["split"] << " B " << B;
      ++batches;
      equal += b.x == want_x && b.y == want_y;
    }
  }
  std::printf("%s: vocab %zu, train %zu, val %zu tokens; %d/%d get_batch draws equal to nanoGPT's\n",
              c["name"].get<std::string>().c_str(), d.vocab().size(), train.size(), val.size(), equal, batches);
}

TEST(TextData, Gpl3MatchesNanoGptGetBatch) {
  const json c = load_json("tests/golden/gpt_train/text_data.json")["gpl3"];
  std::ifstream probe(kTextDefaultPath);
  if (!probe) GTEST_SKIP() << kTextDefaultPath << " is absent on this machine";
  EXPECT_EQ(c["path"].get<std::string>(), kTextDefaultPath);
  EXPECT_EQ(static_cast<int64_t>(slurp(kTextDefaultPath).size()), c["n"].get<int64_t>());
  check_text(TextData::load(kTextDefaultPath), c);
}

TEST(TextData, SyntheticBytesIncludingZeroAnd255) {
  const json c = load_json("tests/golden/gpt_train/text_data.json")["synthetic"];
  const TextData d = TextData::from_bytes(unhex(c["bytes_hex"]), "synthetic");
  check_text(d, c);
  EXPECT_EQ(d.max_block_size(), 4);  // val holds 5 tokens
}

// The message of the UsageError f() throws ("" when none).
template <typename F>
std::string usage_error(F f) {
  try {
    f();
  } catch (const UsageError& e) {
    std::printf("UsageError: %s\n", e.what());
    return e.what();
  }
  return "";
}

TEST(TextData, BadInputIsOneClearLine) {
  EXPECT_NE(
      usage_error([] { TextData::load("/nonexistent/file.txt"); }).find("--data /nonexistent/file.txt: cannot open"),
      std::string::npos);
  EXPECT_NE(usage_error([] { TextData::load(testing::temp_dir()); }).find("cannot read"), std::string::npos);
  const std::string empty = testing::temp_dir() + "/empty";
  std::ofstream(empty).close();
  EXPECT_NE(usage_error([&] { TextData::load(empty); }).find("the file is empty"), std::string::npos);

  const TextData d = TextData::from_bytes(std::string(100, 'a') + "bcdefghijk", "tiny");  // val: 11 tokens
  EXPECT_EQ(d.max_block_size(), 10);
  Generator g(0);
  EXPECT_EQ(usage_error([&] { d.get_batch(Split::kVal, g, 2, 10); }), "");
  const std::string too_long = usage_error([&] { d.get_batch(Split::kTrain, g, 2, 11); });
  EXPECT_NE(too_long.find("--block-size 11 is too long for --data tiny"), std::string::npos);
  EXPECT_NE(too_long.find("must be at most 10"), std::string::npos);
  EXPECT_NE(usage_error([&] { d.get_batch(Split::kTrain, g, 0, 4); }).find("--batch-size must be at least 1"),
            std::string::npos);
  EXPECT_NE(usage_error([&] { d.get_batch(Split::kTrain, g, 1, 0); }).find("--block-size must be at least 1"),
            std::string::npos);
  EXPECT_NE(usage_error([&] { d.decode({11}); }).find("token 11 is outside the vocabulary of 11"), std::string::npos);
  EXPECT_NE(usage_error([&] { d.encode("z"); }).find("byte 0x7a does not occur"), std::string::npos);
}

}  // namespace
}  // namespace ddplab
