// src/safetensors against crafted files: every header field checked against the format's rules and the
// file's real size (shapes, offsets, dtypes, the header's bound), non-regular files, one-line refusals.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/safetensors_files.h"

namespace ddplab {
namespace {

using namespace safetensors_testing;

TEST(Safetensors, OwnCheckpointsRoundTripWithVerifiedChecksum) {
  const std::string path = write_file("own.safetensors", "");
  TensorMap in;
  in["w"] = {{2, 3}, {1.5f, -2.0f, 0.25f, -0.0f, 3e-45f, 1e30f}};
  in["b"] = {{3}, {7.0f, 8.0f, 9.0f}};
  in["empty"] = {{0, 4}, {}};
  ASSERT_EQ(safetensors::save(path, in), "");
  LoadInfo info;
  const TensorMap out = safetensors::load(path, &info);
  EXPECT_TRUE(info.checksum_verified);
  EXPECT_EQ(info.metadata.at("format"), "pt");
  ASSERT_EQ(out.size(), 3u);
  for (const auto& [name, t] : in) {
    EXPECT_EQ(out.at(name).shape, t.shape) << name;
    ASSERT_EQ(out.at(name).data.size(), t.data.size()) << name;
    for (size_t i = 0; i < t.data.size(); ++i) EXPECT_EQ(bits(out.at(name).data[i]), bits(t.data[i])) << name << i;
  }
}

// The refusals the tests below expect, one table for the file. A row: the test (by its name), then the file
// it crafts (name, data, header) and a part of the reason that file must be refused for. A test checks its
// rows in the table's order.
struct Case {
  std::string test, file, data, header, expect;
};

const std::vector<Case>& refusal_cases() {
  // The data: 1, 2, 3 or 4 float32s (1.0f, 2.0f, ...), named by their size in bytes.
  static const std::string b4 = f32_bytes({1}), b8 = f32_bytes({1, 2}), b12 = f32_bytes({1, 2, 3}),
                           b16 = f32_bytes({1, 2, 3, 4});
  // A row a case, every row laid out alike (test, file, data / header / reason): not reflowed.
  // clang-format off
  static const std::vector<Case> cases = {
    // (a) Shapes: only non-negative integers, element and byte counts without overflow.
    // (-2) * (-2) = 4 elements = the 16 bytes: accepted before, with a negative shape.
    {"NegativeShapeEntriesAreRefused", "neg2.st", b16,
     R"({"a":{"dtype":"F32","shape":[-2,-2],"data_offsets":[0,16]}})",
     "tensor \"a\": shape entries must be non-negative integers (got -2 in [-2,-2])"},
    {"NegativeShapeEntriesAreRefused", "neg1.st", b16,
     R"({"a":{"dtype":"F32","shape":[4,-1],"data_offsets":[0,16]}})",
     "non-negative integers (got -1"},
    // (2^62 + 1) * 4 bytes wraps to 4: accepted before, then resize(2^62 + 1) threw std::length_error.
    {"OverflowingShapesAreRefused", "wrap.st", b4,
     R"({"a":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}})",
     "needs more than 2^64 bits"},
    // 2^32 * 2^32 elements wraps to 0 (signed overflow before).
    {"OverflowingShapesAreRefused", "wrap0.st", "",
     R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})",
     "needs more than 2^64 bits"},
    {"OverflowingShapesAreRefused", "big.st", b4,
     R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,4]}})",
     "shape entry 9223372036854775808 exceeds 2^63-1"},
    // Beyond 2^64 the JSON number is a float: not an integer.
    {"OverflowingShapesAreRefused", "huge.st", b4,
     R"({"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}})",
     "shape entries must be non-negative integers"},
    // 2.5 was read as 2 before: a [2, 2] tensor from a header that says [2.5, 2].
    {"FractionalShapeEntriesAreRefused", "frac.st", b16,
     R"({"a":{"dtype":"F32","shape":[2.5,2],"data_offsets":[0,16]}})",
     "non-negative integers (got 2.5"},
    {"FractionalShapeEntriesAreRefused", "str.st", b16,
     R"({"a":{"dtype":"F32","shape":"4","data_offsets":[0,16]}})",
     "shape must be a list"},
    // data_offsets: within the data, matching shape x dtype, tiling the data without overlap, gap or tail.
    // Both tensors on the same 8 bytes: accepted before.
    {"OffsetsMustTileTheData", "overlap.st", b8,
     R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
     "tensor \"b\": data_offsets [0, 8] overlap tensor \"a\"'s [0, 8]"},
    {"OffsetsMustTileTheData", "gap.st", b12,
     R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
     "data bytes [4, 8) belong to no tensor"},
    {"OffsetsMustTileTheData", "tail.st", b8,
     R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
     "the last 4 of the 8 data bytes belong to no tensor"},
    {"OffsetsMustTileTheData", "past.st", b8,
     R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
     "data_offsets [0,16] go past the end of the data (8 bytes)"},
    {"OffsetsMustTileTheData", "rev.st", b8,
     R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
     "data_offsets [8,4] end before they begin"},
    {"OffsetsMustTileTheData", "size.st", b8,
     R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})",
     "data_offsets [0,8] hold 8 bytes, its shape [1] of F32 needs 4"},
    {"OffsetsMustTileTheData", "neg_off.st", b8,
     R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})",
     "data_offsets must be [begin, end], two non-negative integers"},
    {"OffsetsMustTileTheData", "three.st", b8,
     R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})",
     "data_offsets must be [begin, end]"},
    {"DtypesAreChecked", "q8.st", b4,
     R"({"a":{"dtype":"Q8","shape":[4],"data_offsets":[0,4]}})",
     "tensor \"a\": unknown dtype \"Q8\" (safetensors has BOOL,U8,"},
    {"DtypesAreChecked", "num.st", b4,
     R"({"a":{"dtype":5,"shape":[4],"data_offsets":[0,4]}})",
     "unknown dtype 5"},
    // A known dtype: its size is checked, then it is refused because only F32 is read.
    {"DtypesAreChecked", "f16.st", b4,
     R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})",
     "tensor \"a\" has dtype F16; only F32 tensors are read"},
    {"DtypesAreChecked", "f16size.st", b4,
     R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,4]}})",
     "its shape [4] of F16 needs 8"},
    {"DtypesAreChecked", "f4.st", b4,
     R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,4]}})",
     "shape [3] of F4 is not a whole number of bytes"},
    {"DtypesAreChecked", "nodtype.st", b4,
     R"({"a":{"shape":[1],"data_offsets":[0,4]}})",
     "needs dtype, shape and data_offsets"},
    {"HeaderIsBoundedAndMustBeAnObject", "array.st", "",
     "[1,2]",
     "corrupt header: a JSON array, not an object of tensors"},
    {"HeaderIsBoundedAndMustBeAnObject", "deep.st", "",
     "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}",
     "corrupt header: JSON nested deeper than 16 levels"},
    {"HeaderIsBoundedAndMustBeAnObject", "badjson.st", "",
     "{\"a\":",
     "corrupt header: [json.exception.parse_error"},
  };
  // clang-format on
  return cases;
}

// The running test's rows of the table: each file is refused, for a reason that contains the row's.
void expect_table_refusals() {
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  int rows = 0;
  for (const Case& c : refusal_cases()) {
    if (c.test != test) continue;
    expect_refused(c.file, c.header, c.data, c.expect);
    ++rows;
  }
  EXPECT_GT(rows, 0) << test << " has no rows in the table";
}

TEST(Safetensors, NegativeShapeEntriesAreRefused) { expect_table_refusals(); }

TEST(Safetensors, OverflowingShapesAreRefused) {
  expect_table_refusals();
  // A zero anywhere makes 0 elements, whatever the other entries: accepted, no data.
  EXPECT_EQ(
      refusal_of("zero.st", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", ""),
      "(loaded)");
}

TEST(Safetensors, FractionalShapeEntriesAreRefused) { expect_table_refusals(); }

// Zero-element tensors: no memcpy from or to a null pointer (UBSan reported it before), shape kept.
TEST(Safetensors, ZeroElementTensorsLoad) {
  const std::string data = f32_bytes({1.5f, 2.5f, -4.0f});
  const std::string path =
      write_file("empty.st", st_bytes(with_sum(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                               R"("empty":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]},)"
                                               R"("z":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                               data),
                                      data));
  const TensorMap m = safetensors::load(path);
  EXPECT_EQ(m.at("empty").shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(m.at("empty").data.empty());
  EXPECT_EQ(m.at("a").data, (std::vector<float>{1.5f, 2.5f}));
  EXPECT_EQ(m.at("z").data, (std::vector<float>{-4.0f}));
  const TensorMap only = safetensors::load(write_file(
      "only_empty.st", st_bytes(with_sum(R"({"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", ""), "")));
  EXPECT_TRUE(only.at("e").data.empty());
  EXPECT_EQ(only.at("e").shape, (std::vector<int64_t>{0}));
}

TEST(Safetensors, OffsetsMustTileTheData) { expect_table_refusals(); }

TEST(Safetensors, DtypesAreChecked) { expect_table_refusals(); }

TEST(Safetensors, HeaderIsBoundedAndMustBeAnObject) {
  // A header length over the limit inside a file big enough to hold it (sparse: no disk used). Before,
  // all 200 MB were read and 150 MB of zeros parsed as JSON.
  const std::string path = write_file("big_header.st", "");
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
    ASSERT_GE(fd, 0);
    const uint64_t n = 150'000'000;
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
    ASSERT_EQ(::write(fd, len, 8), 8);
    ASSERT_EQ(::ftruncate(fd, 200'000'000), 0);
    ::close(fd);
  }
  EXPECT_NE(refusal(path).find("header length 150000000 exceeds the limit of 100000000 bytes"), std::string::npos);
  EXPECT_NE(refusal(write_file("over.st", std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8) + "{}"))
                .find("truncated: header says 18446744073709551615 bytes, the file has 2 after it"),
            std::string::npos);
  expect_table_refusals();
  EXPECT_EQ(refusal_of("nothing.st", "{}", ""), "(loaded)");  // no tensors is a valid file
}

TEST(Safetensors, NonRegularFilesAreRefused) {
  const std::string dir = testing::temp_dir();
  // Before: "truncated: 0 bytes".
  EXPECT_NE(refusal(dir).find(": is a directory; only a regular file is read as safetensors"), std::string::npos);
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Before: open() waited for a writer forever. The lab is run under timeout(1) so that a hang fails.
  const CommandResult f = lab_load({fifo});
  EXPECT_EQ(f.status, 2) << f.err;
  EXPECT_NE(f.err.find(fifo + ": is a fifo; only a regular file is read as safetensors"), std::string::npos) << f.err;
  if (access("/dev/zero", R_OK) == 0) {
    // Before: read without limit (memory grew until the process was killed).
    const CommandResult z = lab_load({"/dev/zero"});
    EXPECT_EQ(z.status, 2) << z.err;
    EXPECT_EQ(z.err, "002_checkpoint: /dev/zero: is a character device; only a regular file is read as safetensors\n");
  }
  EXPECT_NE(refusal(dir + "/missing").find("cannot open: No such file or directory"), std::string::npos);
}

TEST(Safetensors, MessagesAreOneLine) {
  // A name with a newline (JSON "\n") was printed raw, cutting the message in two.
  const std::string m =
      refusal_of("nl.st", R"({"a\nb":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", f32_bytes({1, 2}));
  EXPECT_NE(m.find(R"(tensor "a\nb" has dtype F64)"), std::string::npos) << m;
  const std::string long_name(5000, 'x');
  const std::string l =
      refusal_of("long.st", "{\"" + long_name + "\":{\"dtype\":\"Q\",\"shape\":[],\"data_offsets\":[0,0]}}", "");
  EXPECT_LT(l.size(), 400u) << "names are cut in messages";
}

}  // namespace
}  // namespace ddplab
