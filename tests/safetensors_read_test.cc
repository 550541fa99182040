// src/safetensors reading what others wrote: the checksum verified where present, files without ddplab's
// checksum written by hand here and by Python/PyTorch live, and //notebooks_ported/002_checkpoint --load
// on crafted files (status 2).
#include <unistd.h>

#include <algorithm>
#include <map>

#include "tests/safetensors_files.h"

namespace ddplab {
namespace {

using namespace safetensors_testing;

// (b) The checksum is verified where __metadata__ has one; files without it are read.
TEST(Safetensors, ChecksumIsVerifiedWherePresent) {
  const std::string path = write_file("sum.st", "");
  ASSERT_EQ(safetensors::save(path, {{"w", {{2}, {1.0f, 2.0f}}}}), "");
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes[bytes.size() - 1] ^= 0x01;
  EXPECT_NE(refusal(write_file("flip.st", bytes)).find("checksum mismatch"), std::string::npos);
  const std::string d = f32_bytes({1});
  EXPECT_NE(refusal_of("wrongsum.st",
                       R"({"__metadata__":{"checksum_fnv1a64":"0000000000000000"},)"
                       R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                       d)
                .find("checksum mismatch"),
            std::string::npos);
  EXPECT_NE(refusal_of("numsum.st",
                       R"({"__metadata__":{"checksum_fnv1a64":5},)"
                       R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                       d)
                .find("__metadata__ \"checksum_fnv1a64\" must be a string (got 5)"),
            std::string::npos);
  EXPECT_NE(refusal_of("listmeta.st", R"({"__metadata__":[1],"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d)
                .find("__metadata__ must be an object of strings"),
            std::string::npos);
}

// A Range reads one file's bytes inside a larger one (a record of a trace's steps.log) as the file itself is
// read; a range past the end is refused, and a range cut short is a file whose data ends early.
TEST(Safetensors, RangeReadsAFileInsideAnother) {
  const std::string path = write_file("one.st", "");
  ASSERT_EQ(safetensors::save(path, {{"w", {{2}, {1.0f, 2.0f}}}, {"b", {{1}, {-3.0f}}}}), "");
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string joined = write_file("joined.log", std::string(37, 'x') + bytes + std::string(11, 'y'));
  const safetensors::TensorMap got = safetensors::load(joined, nullptr, "", {37, bytes.size()});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got.at("w").data, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(got.at("b").shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(got.at("b").data, (std::vector<float>{-3.0f}));
  const auto refused = [&](safetensors::Range r) {
    try {
      safetensors::load(joined, nullptr, "", r);
    } catch (const safetensors::FormatError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused({37, bytes.size() + 12}).find("truncated: bytes 37 to"), std::string::npos);
  EXPECT_NE(refused({UINT64_MAX - 4, 8}).find("truncated"), std::string::npos);
  EXPECT_NE(refused({37, bytes.size() - 1}).find("go past the end of the data"), std::string::npos);
  EXPECT_NE(refused({36, bytes.size()}), "accepted");
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

void expect_python_values(const std::string& label, const json& want,
                          const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>& got) {
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
  if (!testing::torch_available())
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch: the Python-written files are skipped";
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
              std::string::npos)
        << r.out;
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
      {write_file("lab_neg.st", st_bytes(with_sum(R"({"a":{"dtype":"F32","shape":[-2,-2],"data_offsets":[0,16]}})",
                                                  f32_bytes({1, 2, 3, 4})),
                                         f32_bytes({1, 2, 3, 4}))),
       "shape entries must be non-negative integers"},
      {write_file("lab_wrap.st",
                  st_bytes(with_sum(R"({"a":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}})",
                                    f32_bytes({1})),
                           f32_bytes({1}))),
       "needs more than 2^64 bits"},
      {write_file("lab_overlap.st", st_bytes(with_sum(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                                      f32_bytes({1})),
                                             f32_bytes({1}))),
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
