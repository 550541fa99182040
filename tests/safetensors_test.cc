// src/safetensors against crafted files (every header field checked against the format's rules and the
// file's real size, one-line refusals), non-regular files, files without ddplab's checksum written by
// hand here and by Python/PyTorch live, and //notebooks_ported/002_checkpoint --load on them (status 2).
#include "src/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "tests/testing.h"

namespace ddplab {
namespace {

using safetensors::FormatError;
using safetensors::LoadInfo;
using safetensors::TensorMap;
using testing::CommandResult;
using testing::json;

// A safetensors file by hand: 8-byte little-endian header length, the header as given, the data.
std::string st_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));  // x86-64: LE
}

std::string write_file(const std::string& name, const std::string& bytes) {
  static const std::string dir = testing::temp_dir();
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

// The one-line refusal of `path`, or "(loaded)".
std::string refusal(const std::string& path) {
  try {
    safetensors::load(path);
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
    EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << "does not name the file: " << what;
    std::printf("refused: %s\n", what.c_str());
    return what;
  }
  return "(loaded)";
}

// The header with ddplab's checksum of `data` added to it, so that a crafted file passes the checksum and
// reaches the checks under test (the loader before these fixes read no file without it).
std::string with_sum(const std::string& header, const std::string& data) {
  if (header.size() < 2 || header[0] != '{') return header;
  const std::string meta = R"("__metadata__":{"checksum_fnv1a64":")" + safetensors::checksum(data) + "\"}";
  return "{" + meta + (header[1] == '}' ? "" : ",") + header.substr(1);
}

std::string refusal_of(const std::string& name, const std::string& header, const std::string& data) {
  return refusal(write_file(name, st_bytes(with_sum(header, data), data)));
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

CommandResult lab_load(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "20", "notebooks_ported/002_checkpoint/002_checkpoint", "--load"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing::run_command(argv);
}

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

// (a) Shapes: only non-negative integers, element and byte counts without overflow.
TEST(Safetensors, NegativeShapeEntriesAreRefused) {
  const std::string data = f32_bytes({1, 2, 3, 4});
  // (-2) * (-2) = 4 elements = the 16 bytes: accepted before, with a negative shape.
  EXPECT_NE(refusal_of("neg2.st", R"({"a":{"dtype":"F32","shape":[-2,-2],"data_offsets":[0,16]}})", data)
                .find("tensor \"a\": shape entries must be non-negative integers (got -2 in [-2,-2])"),
            std::string::npos);
  EXPECT_NE(refusal_of("neg1.st", R"({"a":{"dtype":"F32","shape":[4,-1],"data_offsets":[0,16]}})", data)
                .find("non-negative integers (got -1"),
            std::string::npos);
}

TEST(Safetensors, OverflowingShapesAreRefused) {
  const std::string data = f32_bytes({1});
  // (2^62 + 1) * 4 bytes wraps to 4: accepted before, then resize(2^62 + 1) threw std::length_error.
  EXPECT_NE(refusal_of("wrap.st", R"({"a":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}})", data)
                .find("needs more than 2^64 bits"),
            std::string::npos);
  // 2^32 * 2^32 elements wraps to 0 (signed overflow before).
  EXPECT_NE(refusal_of("wrap0.st", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", "")
                .find("needs more than 2^64 bits"),
            std::string::npos);
  EXPECT_NE(refusal_of("big.st", R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,4]}})", data)
                .find("shape entry 9223372036854775808 exceeds 2^63-1"),
            std::string::npos);
  // Beyond 2^64 the JSON number is a float: not an integer.
  EXPECT_NE(refusal_of("huge.st", R"({"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}})", data)
                .find("shape entries must be non-negative integers"),
            std::string::npos);
  // A zero anywhere makes 0 elements, whatever the other entries: accepted, no data.
  EXPECT_EQ(refusal_of("zero.st", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", ""),
            "(loaded)");
}

TEST(Safetensors, FractionalShapeEntriesAreRefused) {
  // 2.5 was read as 2 before: a [2, 2] tensor from a header that says [2.5, 2].
  EXPECT_NE(refusal_of("frac.st", R"({"a":{"dtype":"F32","shape":[2.5,2],"data_offsets":[0,16]}})", f32_bytes({1, 2, 3, 4}))
                .find("non-negative integers (got 2.5"),
            std::string::npos);
  EXPECT_NE(refusal_of("str.st", R"({"a":{"dtype":"F32","shape":"4","data_offsets":[0,16]}})", f32_bytes({1, 2, 3, 4}))
                .find("shape must be a list"),
            std::string::npos);
}

// Zero-element tensors: no memcpy from or to a null pointer (UBSan reported it before), shape kept.
TEST(Safetensors, ZeroElementTensorsLoad) {
  const std::string data = f32_bytes({1.5f, 2.5f, -4.0f});
  const std::string path = write_file(
      "empty.st", st_bytes(with_sum(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("empty":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]},)"
                                    R"("z":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", data),
                           data));
  const TensorMap m = safetensors::load(path);
  EXPECT_EQ(m.at("empty").shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(m.at("empty").data.empty());
  EXPECT_EQ(m.at("a").data, (std::vector<float>{1.5f, 2.5f}));
  EXPECT_EQ(m.at("z").data, (std::vector<float>{-4.0f}));
  const TensorMap only = safetensors::load(
      write_file("only_empty.st", st_bytes(with_sum(R"({"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", ""), "")));
  EXPECT_TRUE(only.at("e").data.empty());
  EXPECT_EQ(only.at("e").shape, (std::vector<int64_t>{0}));
}

// data_offsets: within the data, matching shape x dtype, tiling the data without overlap, gap or tail.
TEST(Safetensors, OffsetsMustTileTheData) {
  const std::string d8 = f32_bytes({1, 2});
  // Both tensors on the same 8 bytes: accepted before.
  EXPECT_NE(refusal_of("overlap.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8)
                .find("tensor \"b\": data_offsets [0, 8] overlap tensor \"a\"'s [0, 8]"),
            std::string::npos);
  EXPECT_NE(refusal_of("gap.st", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", f32_bytes({1, 2, 3}))
                .find("data bytes [4, 8) belong to no tensor"),
            std::string::npos);
  EXPECT_NE(refusal_of("tail.st", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d8)
                .find("the last 4 of the 8 data bytes belong to no tensor"),
            std::string::npos);
  EXPECT_NE(refusal_of("past.st", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d8)
                .find("data_offsets [0,16] go past the end of the data (8 bytes)"),
            std::string::npos);
  EXPECT_NE(refusal_of("rev.st", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", d8)
                .find("data_offsets [8,4] end before they begin"),
            std::string::npos);
  EXPECT_NE(refusal_of("size.st", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", d8)
                .find("data_offsets [0,8] hold 8 bytes, its shape [1] of F32 needs 4"),
            std::string::npos);
  EXPECT_NE(refusal_of("neg_off.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", d8)
                .find("data_offsets must be [begin, end], two non-negative integers"),
            std::string::npos);
  EXPECT_NE(refusal_of("three.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", d8)
                .find("data_offsets must be [begin, end]"),
            std::string::npos);
}

TEST(Safetensors, DtypesAreChecked) {
  const std::string d4 = f32_bytes({1});
  EXPECT_NE(refusal_of("q8.st", R"({"a":{"dtype":"Q8","shape":[4],"data_offsets":[0,4]}})", d4)
                .find("tensor \"a\": unknown dtype \"Q8\" (safetensors has BOOL,U8,"),
            std::string::npos);
  EXPECT_NE(refusal_of("num.st", R"({"a":{"dtype":5,"shape":[4],"data_offsets":[0,4]}})", d4).find("unknown dtype 5"),
            std::string::npos);
  // A known dtype: its size is checked, then it is refused because only F32 is read.
  EXPECT_NE(refusal_of("f16.st", R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", d4)
                .find("tensor \"a\" has dtype F16; only F32 tensors are read"),
            std::string::npos);
  EXPECT_NE(refusal_of("f16size.st", R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,4]}})", d4)
                .find("its shape [4] of F16 needs 8"),
            std::string::npos);
  EXPECT_NE(refusal_of("f4.st", R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,4]}})", d4)
                .find("shape [3] of F4 is not a whole number of bytes"),
            std::string::npos);
  EXPECT_NE(refusal_of("nodtype.st", R"({"a":{"shape":[1],"data_offsets":[0,4]}})", d4)
                .find("needs dtype, shape and data_offsets"),
            std::string::npos);
}

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
  EXPECT_NE(refusal_of("array.st", "[1,2]", "").find("corrupt header: a JSON array, not an object of tensors"),
            std::string::npos);
  EXPECT_NE(refusal_of("deep.st", "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}", "")
                .find("corrupt header: JSON nested deeper than 16 levels"),
            std::string::npos);
  EXPECT_NE(refusal_of("badjson.st", "{\"a\":", "").find("corrupt header: [json.exception.parse_error"), std::string::npos);
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
  const std::string m = refusal_of("nl.st", R"({"a\nb":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", f32_bytes({1, 2}));
  EXPECT_NE(m.find(R"(tensor "a\nb" has dtype F64)"), std::string::npos) << m;
  const std::string long_name(5000, 'x');
  const std::string l = refusal_of("long.st", "{\"" + long_name + "\":{\"dtype\":\"Q\",\"shape\":[],\"data_offsets\":[0,0]}}", "");
  EXPECT_LT(l.size(), 400u) << "names are cut in messages";
}

// (b) The checksum is verified where __metadata__ has one; files without it are read.
TEST(Safetensors, ChecksumIsVerifiedWherePresent) {
  const std::string path = write_file("sum.st", "");
  ASSERT_EQ(safetensors::save(path, {{"w", {{2}, {1.0f, 2.0f}}}}), "");
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes[bytes.size() - 1] ^= 0x01;
  EXPECT_NE(refusal(write_file("flip.st", bytes)).find("checksum mismatch"), std::string::npos);
  const std::string d = f32_bytes({1});
  EXPECT_NE(refusal_of("wrongsum.st", R"({"__metadata__":{"checksum_fnv1a64":"0000000000000000"},)"
                                      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d)
                .find("checksum mismatch"),
            std::string::npos);
  EXPECT_NE(refusal_of("numsum.st", R"({"__metadata__":{"checksum_fnv1a64":5},)"
                                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d)
                .find("__metadata__ \"checksum_fnv1a64\" must be a string (got 5)"),
            std::string::npos);
  EXPECT_NE(refusal_of("listmeta.st", R"({"__metadata__":[1],"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d)
                .find("__metadata__ must be an object of strings"),
            std::string::npos);
}

TEST(Safetensors, ReadsStandardFilesWithoutChecksum) {
  // Refused before with "no __metadata__ checksum". Values written here, by hand, in the data order
  // b then a (the header's order does not matter), the header padded with spaces as safetensors does.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}   )";
  const std::string data = f32_bytes({-1.0f, 0.5f, 1.0f, 2.0f, 3.0f, -0.0f});
  for (const std::string& h : {header, R"({"__metadata__":{"format":"pt"},)" + header.substr(1)}) {
    LoadInfo info;
    const TensorMap m = safetensors::load(write_file("standard.st", st_bytes(h, data)), &info);
    EXPECT_FALSE(info.checksum_verified);
    EXPECT_EQ(m.at("b").shape, (std::vector<int64_t>{2}));
    EXPECT_EQ(m.at("b").data, (std::vector<float>{-1.0f, 0.5f}));
    EXPECT_EQ(m.at("a").shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(m.at("a").data, (std::vector<float>{1.0f, 2.0f, 3.0f, -0.0f}));
    EXPECT_TRUE(std::signbit(m.at("a").data[3]));
  }
}

// Writes standard safetensors files from PyTorch tensors: with the safetensors package when installed
// (safetensors.torch.save_file), else by hand in the format's layout. Prints the tensors' values as JSON.
constexpr const char* kPythonWriter = R"PY(
import json, struct, sys
import torch
out = sys.argv[1]
torch.manual_seed(0)
tensors = {
    'layer.weight': torch.randn(3, 4),
    'layer.bias': torch.randn(4),
    'empty': torch.zeros(0, 5),
    'scalar': torch.tensor(3.5),
    'special': torch.tensor([-0.0, 1e-45, 3.4028234663852886e38, -1.1754943508222875e-38]),
}
def write(path, metadata):
    try:
        from safetensors.torch import save_file
        save_file(tensors, path, metadata=metadata)
        return 'safetensors.torch.save_file'
    except ImportError:
        pass
    header, data = {}, b''
    if metadata is not None:
        header['__metadata__'] = metadata
    for name in sorted(tensors, reverse=True):  # data order unlike the name order
        vals = tensors[name].flatten().tolist()
        b = struct.pack('<%df' % len(vals), *vals)
        header[name] = {'dtype': 'F32', 'shape': list(tensors[name].shape), 'data_offsets': [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + data)
    return 'by hand (no safetensors package)'
w1 = write(out + '/plain.safetensors', None)
w2 = write(out + '/meta.safetensors', {'format': 'pt'})
json.dump({n: {'shape': list(t.shape), 'values': t.flatten().tolist()} for n, t in tensors.items()},
          open(out + '/values.json', 'w'))
print('written', w1, w2)
)PY";

void expect_python_values(const std::string& label, const json& want, const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>& got) {
  ASSERT_EQ(got.size(), want.size()) << label;
  for (const auto& [name, w] : want.items()) {
    ASSERT_TRUE(got.count(name)) << label << " " << name;
    const auto& [shape, values] = got.at(name);
    EXPECT_EQ(shape, w["shape"].get<std::vector<int64_t>>()) << label << " " << name;
    const std::vector<double> wv = w["values"].get<std::vector<double>>();
    ASSERT_EQ(values.size(), wv.size()) << label << " " << name;
    int64_t equal = 0;
    for (size_t i = 0; i < wv.size(); ++i) equal += bits(values[i]) == bits(static_cast<float>(wv[i]));
    EXPECT_EQ(equal, static_cast<int64_t>(wv.size())) << label << " " << name;
    std::printf("%s %s: %lld/%zu bitwise equal to what Python wrote\n", label.c_str(), name.c_str(),
                static_cast<long long>(equal), wv.size());
  }
}

TEST(Safetensors, ReadsFilesWrittenByPython) {
  if (!testing::torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: the Python-written files are skipped";
  const std::string dir = testing::temp_dir();
  const CommandResult py = testing::run_command({"/usr/bin/python3", "-c", kPythonWriter, dir});
  ASSERT_EQ(py.status, 0) << py.err;
  std::printf("python: %s", py.out.c_str());
  const json want = testing::load_json(dir + "/values.json");
  for (const std::string name : {"plain", "meta"}) {
    const std::string path = dir + "/" + name + ".safetensors";
    LoadInfo info;
    std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> got;
    for (const auto& [n, t] : safetensors::load(path, &info)) got[n] = {t.shape, t.data};
    EXPECT_FALSE(info.checksum_verified);
    expect_python_values("load " + name, want, got);
    // The lab: lists them, says the data is unverified, and its --dump holds Python's values.
    const std::string dump = dir + "/" + name + ".json";
    const CommandResult r = lab_load({path, "--dump", dump});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("layer.weight torch.Size([3, 4]) 12 floats\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("empty torch.Size([0, 5]) 0 floats\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("scalar torch.Size([]) 1 floats\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("no checksum_fnv1a64 in __metadata__ (not written by ddplab): the data is read unverified"),
              std::string::npos) << r.out;
    got.clear();
    const json dumped = testing::load_json(dump);
    for (const auto& [n, t] : dumped.items()) {
      std::vector<float> v;
      for (double x : t["values"].get<std::vector<double>>()) v.push_back(static_cast<float>(x));
      got[n] = {t["shape"].get<std::vector<int64_t>>(), v};
    }
    expect_python_values("002_checkpoint --load " + name + " --dump", want, got);
  }
}

// The lab turns every refusal into one line on stderr and status 2 (before: std::length_error aborted it,
// a negative shape was listed, a directory was "truncated").
TEST(Safetensors, LabLoadRefusesCraftedFilesWithStatus2) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {write_file("lab_neg.st", st_bytes(with_sum(R"({"a":{"dtype":"F32","shape":[-2,-2],"data_offsets":[0,16]}})", f32_bytes({1, 2, 3, 4})), f32_bytes({1, 2, 3, 4}))),
       "shape entries must be non-negative integers"},
      {write_file("lab_wrap.st", st_bytes(with_sum(R"({"a":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}})", f32_bytes({1})), f32_bytes({1}))),
       "needs more than 2^64 bits"},
      {write_file("lab_overlap.st", st_bytes(with_sum(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32_bytes({1})), f32_bytes({1}))),
       "overlap"},
      {testing::temp_dir(), "is a directory"},
  };
  for (const auto& [path, expect] : cases) {
    const CommandResult r = lab_load({path});
    EXPECT_EQ(r.status, 2) << path << "\n" << r.out << r.err;
    EXPECT_EQ(r.out, "") << "nothing listed for a refused file";
    EXPECT_NE(r.err.find("002_checkpoint: " + path + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // A --dump of a refused file is not written; an unwritable --dump is refused before reading.
  const std::string dir = testing::temp_dir();
  EXPECT_EQ(lab_load({cases[0].first, "--dump", dir + "/out.json"}).status, 2);
  EXPECT_NE(access((dir + "/out.json").c_str(), F_OK), 0);
  const CommandResult w = lab_load({cases[0].first, "--dump", "/nonexistent/out.json"});
  EXPECT_EQ(w.status, 2);
  EXPECT_EQ(w.err, "002_checkpoint: --dump: directory '/nonexistent' does not exist\n");
}

}  // namespace
}  // namespace ddplab
