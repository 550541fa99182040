// ddp_check's reader and replay on traces written here, by hand, in the format ddplab_trace writes
// (docs/trace_format.md), with no torch: a two-rank SGD run whose every value is a small binary fraction
// (sums exact in any order, as nccl-tests chooses its data), checked as predicted; then each kind of bad
// trace the issue names, refused with one line naming the file; then a seeded mutation fuzzer over the
// manifest and the step files: every case must end in TraceError or a result, never a crash, another
// exception or an allocation sized by the input (this suite also runs under ASan and UBSan in CI).
#include <sys/stat.h>

#include <cmath>
#include <limits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "src/check/check.h"
#include "tests/fuzz.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string f32(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string step_file(const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>& tensors,
                      const json& meta,
                      const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<double>>>& f64 = {}) {
  json header = json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", "F32"}, {"shape", t.first}, {"data_offsets", {data.size(), data.size() + 4 * t.second.size()}}};
    data += f32(t.second);
  }
  for (const auto& [name, t] : f64) {
    header[name] = {{"dtype", "F64"}, {"shape", t.first}, {"data_offsets", {data.size(), data.size() + 8 * t.second.size()}}};
    data += std::string(reinterpret_cast<const char*>(t.second.data()), t.second.size() * 8);
  }
  header["__metadata__"] = {{"ddplab", meta.dump()}};
  return fuzz::le64(header.dump().size()) + header.dump() + data;
}

// A run of two ranks, parameters w [2, 2] and b [2], plain SGD lr 0.5, two steps; `tamper` may change
// rank 1's gradient after DDP (a finding) before the files are written. `whole_run` adds a third step in the
// whole-run mode (digests compared, a 4-slot sample replayed); `sample_flip` flips the last bit of rank 1's
// sampled .grad after DDP there. The whole-run step keeps the weighted sums of each local gradient and of .grad
// after DDP (the recorder's weights written out); `wsum_off` moves b's .grad sum on every rank by 0.001.
std::string make_trace(const std::string& dir, bool tamper = false, bool overflow = false, bool whole_run = false,
                       bool sample_flip = false, bool wsum_off = false) {
  std::vector<float> local[2][2] = {{{0.5f, -1.0f, 0.25f, 2.0f}, {1.0f, -0.5f}},
                                    {{1.5f, 1.0f, -0.75f, 0.0f}, {0.0f, 0.5f}}};
  if (overflow) local[1][1][0] = std::numeric_limits<float>::quiet_NaN();  // one rank's loss overflowed
  std::vector<float> w = {1.0f, 2.0f, -1.0f, 0.5f}, b = {0.25f, -0.25f};
  ::mkdir(dir.c_str(), 0755);
  for (int r = 0; r < 2; ++r) ::mkdir((dir + "/rank" + std::to_string(r)).c_str(), 0755);
  for (int step = 0; step < (whole_run ? 3 : 2); ++step) {
    std::vector<float> avg_w(4), avg_b(2);
    for (size_t k = 0; k < 4; ++k) avg_w[k] = local[0][0][k] * 0.5f + local[1][0][k] * 0.5f;
    for (size_t k = 0; k < 2; ++k) avg_b[k] = local[0][1][k] * 0.5f + local[1][1][k] * 0.5f;
    std::vector<float> w2 = w, b2 = b;
    for (size_t k = 0; k < 4; ++k) w2[k] = std::fma(avg_w[k], -0.5f, w[k]);
    for (size_t k = 0; k < 2; ++k) b2[k] = std::fma(avg_b[k], -0.5f, b[k]);
    for (int r = 0; r < 2; ++r) {
      std::vector<float> seen_w = avg_w;
      if (tamper && r == 1) seen_w[0] *= 2.0f;
      std::vector<float> after_w = w2;
      if (tamper && r == 1) after_w[0] = std::fma(seen_w[0], -0.5f, w[0]);
      json meta = {{"step", step}, {"rank", r}, {"run_id", "abc"},
                   {"backwards", {{{"sync", true}, {"ready", {1, 0}}}}},
                   {"inputs", {{r ? "02" : "01", r ? "04" : "03"}}}, {"lr", {0.5}},
                   {"outside", {{"frozen", 7}}}};  // a parameter DDP does not reduce, unchanged
      if (!overflow) meta["nonfinite"] = json::object();  // with a NaN: a trace from before the recorder noted them
      std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors = {
          {"local/0/w", {{2, 2}, local[r][0]}}, {"local/0/b", {{2}, local[r][1]}},
          {"grad/w", {{2, 2}, avg_w}},          {"grad/b", {{2}, avg_b}},
          {"grad_step/w", {{2, 2}, seen_w}},    {"grad_step/b", {{2}, avg_b}},
          {"param_before/w", {{2, 2}, w}},      {"param_before/b", {{2}, b}},
          {"param_after/w", {{2, 2}, after_w}}, {"param_after/b", {{2}, b2}}};
      if (step == 2) {
        // The whole-run mode: no local/, and the sample. Slot k is element ((step * 4 + k) * 2654435761) mod 6 of
        // [w b] laid end to end (the rule in docs/trace_format.md, written out here): 2, 3 (w: laid out
        // column-major, so the recorder leaves it out) and 4, 5 (b's two elements).
        meta["mode"] = "digests";
        tensors.erase("local/0/w"), tensors.erase("local/0/b");
        std::map<std::string, std::vector<float>> sample;
        json absent = json::array();
        for (uint64_t k = 0; k < 4; ++k) {
          const uint64_t flat = ((2 * 4 + k) * uint64_t{2654435761}) % 6;
          const size_t e = flat < 4 ? 0 : flat - 4;
          if (flat < 4) absent.push_back(k);
          sample["local/0"].push_back(flat < 4 ? 0.0f : local[r][1][e]);
          sample["grad"].push_back(flat < 4 ? 0.0f : avg_b[e]);
          sample["grad_step"].push_back(flat < 4 ? 0.0f : avg_b[e]);
          sample["param_before"].push_back(flat < 4 ? 0.0f : b[e]);
          sample["param_after"].push_back(flat < 4 ? 0.0f : b2[e]);
        }
        if (sample_flip && r == 1) {
          uint32_t bits;
          std::memcpy(&bits, &sample["grad"][3], sizeof bits);
          bits ^= 1u;
          std::memcpy(&sample["grad"][3], &bits, sizeof bits);
        }
        meta["sample"] = {{"slots", 4}, {"absent", json::object()}};
        for (auto& [kind, v] : sample) {
          meta["sample"]["absent"][kind] = absent;
          tensors["sample/" + kind] = {{4}, v};
        }
      }
      std::map<std::string, std::pair<std::vector<int64_t>, std::vector<double>>> sums;
      if (step == 2) {  // [S, A, Q] per parameter [w, b]: w_i = 1 + ((i * 2654435761) mod 2^20) / 2^20, i mod 1021
        const auto weighted = [](const std::vector<float>& x, bool absolute) {
          double acc = 0.0;
          for (uint64_t i = 0; i < x.size(); ++i)
            acc += (1.0 + static_cast<double>((i * 2654435761u) % (1u << 20)) / (1u << 20)) *
                   (absolute ? std::fabs(static_cast<double>(x[i])) : x[i]);
          return acc;
        };
        const auto squares = [](const std::vector<float>& x) {
          double acc = 0.0;
          for (const float v : x) acc += static_cast<double>(v) * v;
          return acc;
        };
        const double nan = std::numeric_limits<double>::quiet_NaN();
        sums["wsum/local/0"] = {{2, 3}, {weighted(local[r][0], false), weighted(local[r][0], true), squares(local[r][0]),
                                         weighted(local[r][1], false), weighted(local[r][1], true), squares(local[r][1])}};
        sums["wsum/grad"] = {{2, 3}, {weighted(avg_w, false), nan, squares(avg_w),
                                      weighted(avg_b, false) + (wsum_off ? 1e-3 : 0.0), nan, squares(avg_b)}};
        meta["wsum"] = {{"columns", 1021}};
      }
      const std::string bytes = step_file(tensors, meta, sums);
      char name[64];
      std::snprintf(name, sizeof name, "/rank%d/step%06d.safetensors", r, step);
      write(dir + name, bytes);
    }
    w = w2;
    b = b2;
    if (tamper) break;  // one step is enough to see it
  }
  for (int r = 0; r < 2; ++r) {
    const json manifest = {
        {"format", "ddplab-trace"}, {"version", 1}, {"run_id", "abc"}, {"rank", r}, {"world_size", 2},
        {"backend", "gloo"}, {"torch_version", "test"}, {"every", 1},
        {"steps", tamper ? json::array({0}) : whole_run ? json::array({0, 1, 2}) : json::array({0, 1})},
        {"ddp", {{"bucket_cap_mb", 25.0}, {"comm_hook", nullptr}}},
        // w laid out column-major (strides [1, 2], as channels_last lays out a conv weight): its bucket holds it
        // in memory order; at two ranks the same sums either way.
        {"params", {{{"name", "w"}, {"shape", {2, 2}}, {"strides", {1, 2}}, {"dtype", "float32"}},
                    {{"name", "b"}, {"shape", {2}}, {"dtype", "float32"}}}},
        {"outside_params", {{{"name", "frozen"}, {"shape", {2}}, {"why", "frozen"}, {"in_optimizer", false}}}},
        {"buffers", json::array()},
        {"optimizer", {{"class", "SGD"}, {"param_groups", {{{"params", {0, 1}}, {"lr", 0.5}, {"momentum", 0.0}}}}}},
        {"first_ready_order", {1, 0}},
        // Two ranks need no order (a + b = b + a): parsed and checked, not used; here for the fuzzer.
        {"allreduce_order", {{"measured", true}, {"seed", 1}, {"all_reduces", 2},
                             {"sizes", {{{"n", 6}, {"runs", {{0, 4, {1, 0}}, {4, 6, {0, 1}}}}, {"digest", 5}}}}}}};
    write(dir + "/rank" + std::to_string(r) + "/manifest.json", manifest.dump(1));
  }
  return dir;
}

// The recorder's digest, as ddp_check takes it of a prediction: the fixed vectors' digests were printed by the
// recorder itself (`python3 tests/ddp_check/digest.py`, which also checks the recorder against the definition).
std::vector<float> fixed_vector(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const auto bits = static_cast<uint32_t>((uint64_t{i} * 2654435761u) % (uint64_t{1} << 32));
    std::memcpy(&v[i], &bits, sizeof bits);
  }
  return v;
}

TEST(Digest, Fold64IsTheRecordersDigest) {
  const std::pair<size_t, uint32_t> printed[] = {{1, 3366278839u}, {2, 1530854884u}, {2043, 4147633701u}, {5000, 3120820085u}};
  for (const auto& [n, digest] : printed) {
    const std::vector<float> v = fixed_vector(n);
    EXPECT_EQ(check::fold64_of(v.data(), v.size()), digest) << "n = " << n;
  }
}

TEST(Digest, Fold64SeesAChangedBitAndAMovedValue) {
  std::vector<float> v = fixed_vector(3 * 2042 + 5);
  const uint32_t d = check::fold64_of(v.data(), v.size());
  for (size_t i : {size_t{0}, size_t{1}, size_t{2041}, v.size() - 1}) {
    std::vector<float> w = v;
    uint32_t bits;
    std::memcpy(&bits, &w[i], sizeof bits);
    bits ^= 1u;
    std::memcpy(&w[i], &bits, sizeof bits);
    EXPECT_NE(check::fold64_of(w.data(), w.size()), d) << "last bit of element " << i;
  }
  std::vector<float> w = v;  // two floats trade places (rows of a matrix swapped, say): other columns, other sums
  std::swap(w[10], w[2000]);
  EXPECT_NE(check::fold64_of(w.data(), w.size()), d);
  EXPECT_NE(check::fold64_of(v.data(), v.size() - 1), d);  // one float fewer
}

TEST(CheckTrace, HandMadeRunIsAsPredicted) {
  const std::string dir = make_trace(testing::temp_dir() + "/run");
  const check::CheckResult r = check::check_run(check::open_run(dir));
  std::printf("%s", check::format_text(r).c_str());
  EXPECT_FALSE(r.problems());
  EXPECT_EQ(r.grads.checked, 8);  // 2 steps x 2 ranks x 2 parameters
  EXPECT_EQ(r.grads.exact, 8);
  EXPECT_EQ(r.params.exact, 8);
  EXPECT_TRUE(r.order_known);
}

// A whole-run step: its digests compared across the ranks, and its sample (b's two elements) replayed through the
// all-reduce and SGD's step bit for bit; a sampled .grad one bit off on rank 1 is named at that step and element.
TEST(CheckTrace, WholeRunSampleIsReplayed) {
  const check::CheckResult r = check::check_run(check::open_run(make_trace(testing::temp_dir() + "/whole", false, false, true)));
  std::printf("%s", check::format_text(r).c_str());
  EXPECT_FALSE(r.problems());
  EXPECT_EQ(r.sampled.steps, 1);
  EXPECT_EQ(r.sampled.values, 8);  // 2 ranks x 2 elements x (.grad after DDP, the parameter after the step)
  EXPECT_EQ(r.sampled.exact, 8);
  EXPECT_EQ(r.wsum.steps, 1);
  EXPECT_EQ(r.wsum.tensors, 4);  // 2 ranks x [w b]
  EXPECT_EQ(r.wsum.within, 4);
  // The report's norms of the whole-run step, from its sums of squares: rank 1's local gradient
  // (1.5, 1, -0.75, 0 | 0, 0.5) and .grad after DDP, the ranks' mean (1, 0, -0.25, 1 | 0.5, 0).
  ASSERT_EQ(r.local_norm.size(), 3u);
  EXPECT_DOUBLE_EQ(r.local_norm[2][1], std::sqrt(1.5 * 1.5 + 1 + 0.75 * 0.75 + 0.25));
  EXPECT_DOUBLE_EQ(r.ddp_norm[2][1], std::sqrt(1 + 0.0625 + 1 + 0.25));
  const check::CheckResult bad =
      check::check_run(check::open_run(make_trace(testing::temp_dir() + "/flip", false, false, true, true)));
  std::printf("%s", check::format_text(bad).c_str());
  EXPECT_EQ(bad.sampled.exact, 7);
  const check::Finding* f = nullptr;
  for (const check::Finding& g : bad.findings)
    if (g.kind == "grad-not-as-predicted") f = &g;
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->cause, "sample");
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->step, 2);
  EXPECT_EQ(f->name, "b");
  EXPECT_NE(f->message.find("element 1"), std::string::npos) << f->message;
}

// The whole-run step's weighted sums: b's .grad after DDP, its sum moved by 0.001 on every rank (far beyond the
// rounding of 2-rank sums of values near 1), is named once for every rank; w's stays within its bound.
TEST(CheckTrace, WholeRunWeightedSumOutsideTheBoundIsNamed) {
  const check::CheckResult r = check::check_run(
      check::open_run(make_trace(testing::temp_dir() + "/wsum", false, false, true, false, true)));
  std::printf("%s", check::format_text(r).c_str());
  EXPECT_EQ(r.wsum.tensors, 4);
  EXPECT_EQ(r.wsum.within, 2);
  const check::Finding* f = nullptr;
  for (const check::Finding& g : r.findings)
    if (g.kind == "grad-not-as-predicted" && g.cause == "weighted-sum") f = &g;
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rank, -1);
  EXPECT_EQ(f->step, 2);
  EXPECT_EQ(f->name, "b");
  EXPECT_NE(f->message.find("every rank's .grad of 'b'"), std::string::npos) << f->message;
}

// torch's own layout, as the recorder saw it, is compared with the replay's: a layout that differs is said,
// and the replay adds in torch's buckets.
TEST(CheckTrace, BucketLayoutOtherThanPredictedIsNoted) {
  const std::string dir = make_trace(testing::temp_dir() + "/run");
  for (const char* r : {"/rank0/manifest.json", "/rank1/manifest.json"}) {
    json m = json::parse(slurp(dir + r));
    m["buckets"] = {{"initial", {{1}, {0}}}, {"rebuilt", {{1, 0}}}};
    write(dir + r, m.dump());
  }
  const check::CheckResult r = check::check_run(check::open_run(dir));
  std::printf("%s", check::format_text(r).c_str());
  EXPECT_FALSE(r.problems());  // with two ranks every order adds alike
  int notes = 0;
  for (const check::Finding& f : r.findings) notes += f.kind == "buckets-not-as-predicted";
  EXPECT_EQ(notes, 1);  // iteration 0's; the rebuilt one is the predicted [b w]
}

TEST(CheckTrace, NanIsReportedNotFatal) {
  const std::string dir = make_trace(testing::temp_dir() + "/run", false, true);
  const check::CheckResult r = check::check_run(check::open_run(dir));
  std::printf("%s", check::format_text(r).c_str());
  EXPECT_EQ(r.grads.exact, r.grads.checked);  // the NaNs are where DDP's average puts them
  // Read from the values (the trace has no "nonfinite"): rank 1's local gradient of b, a NaN from finite inputs
  // and parameters, and from step 0 every rank's parameters hold it: a problem.
  const check::Finding* f = nullptr;
  for (const check::Finding& g : r.findings)
    if (g.kind == "nonfinite") f = &g;
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->cause, "overflow");
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->step, 0);
  EXPECT_EQ(f->name, "b");
  EXPECT_EQ(f->severity, "problem");
  EXPECT_NE(f->message.find("From step 0 every rank's parameters hold NaN"), std::string::npos) << f->message;
}

TEST(CheckTrace, GradientChangedOnOneRankIsNamed) {
  const std::string dir = make_trace(testing::temp_dir() + "/run", true);
  const check::CheckResult r = check::check_run(check::open_run(dir));
  std::printf("%s", check::format_text(r).c_str());
  ASSERT_TRUE(r.problems());
  bool found = false;
  for (const check::Finding& f : r.findings)
    found = found || (f.kind == "replicas-diverged" && f.cause == "gradients-changed" && f.rank == 1 && f.name == "w" && f.step == 0);
  EXPECT_TRUE(found);
}

// check_run refuses `dir` in one line (a TraceError) that holds `expect`.
void expect_refused(const std::string& dir, const std::string& label, const std::string& expect) {
  try {
    check::check_run(check::open_run(dir));
    ADD_FAILURE() << label << ": accepted";
  } catch (const check::TraceError& e) {
    const std::string msg = e.what();
    std::printf("%-22s %s\n", label.c_str(), msg.c_str());
    EXPECT_EQ(msg.find('\n'), std::string::npos) << label;
    EXPECT_NE(msg.find(expect), std::string::npos) << label << ": " << msg;
  }
}

// One bad trace: `damage` breaks a fresh copy; open_run + check_run must throw one TraceError line that
// contains `expect` (a file name and what is wrong).
void expect_refused(const std::string& label, const std::function<void(const std::string&)>& damage,
                    const std::string& expect) {
  const std::string dir = make_trace(testing::temp_dir() + "/" + label);
  damage(dir);
  expect_refused(dir, label, expect);
}

TEST(CheckTrace, BadTracesGetOneLineNamingTheFile) {
  expect_refused("missing_dir", [](const std::string& d) { fs::remove_all(d); }, "is not a directory");
  expect_refused("empty_dir", [](const std::string& d) { fs::remove_all(d + "/rank0"), fs::remove_all(d + "/rank1"); },
                 "has no rank0/");
  expect_refused("missing_rank", [](const std::string& d) { fs::remove_all(d + "/rank1"); },
                 "rank1: missing");
  expect_refused("missing_step", [](const std::string& d) { std::remove((d + "/rank1/step000001.safetensors").c_str()); },
                 "step000001.safetensors: missing");
  expect_refused("truncated", [](const std::string& d) {
    const std::string p = d + "/rank0/step000000.safetensors";
    const std::string s = slurp(p);
    write(p, s.substr(0, s.size() - 5));
  }, "step000000.safetensors");
  expect_refused("corrupt_header", [](const std::string& d) {
    const std::string p = d + "/rank1/step000001.safetensors";
    std::string s = slurp(p);
    s[10] = '\x01';
    write(p, s);
  }, "step000001.safetensors");
  expect_refused("absurd_header", [](const std::string& d) {
    const std::string p = d + "/rank0/step000000.safetensors";
    write(p, fuzz::le64(uint64_t{1} << 62) + slurp(p).substr(8));
  }, "header says");
  expect_refused("other_run", [](const std::string& d) {
    const std::string p = d + "/rank1/manifest.json";
    json m = json::parse(slurp(p));
    m["run_id"] = "other";
    write(p, m.dump());
  }, "another run");
  expect_refused("shapes_disagree", [](const std::string& d) {
    for (const char* r : {"/rank0/manifest.json", "/rank1/manifest.json"}) {
      json m = json::parse(slurp(d + r));
      m["params"][0]["shape"] = {4, 1, 2};
      m["params"][0].erase("strides");
      write(d + r, m.dump());
    }
  }, "but the manifest says [4, 1, 2]");
  expect_refused("not_json", [](const std::string& d) { write(d + "/rank0/manifest.json", "{\"format\": "); }, "not valid JSON");
  expect_refused("order_no_permutation", [](const std::string& d) {
    json m = json::parse(slurp(d + "/rank0/manifest.json"));
    m["allreduce_order"]["sizes"][0]["runs"][0][2] = {1, 1};
    write(d + "/rank0/manifest.json", m.dump());
  }, "allreduce_order for n = 6: run [0, 4) is no permutation of the 2 ranks");
  expect_refused("order_gap", [](const std::string& d) {
    json m = json::parse(slurp(d + "/rank0/manifest.json"));
    m["allreduce_order"]["sizes"][0]["runs"][1][0] = 5;
    write(d + "/rank0/manifest.json", m.dump());
  }, "does not follow element 4");
  expect_refused("order_too_large", [](const std::string& d) {
    json m = json::parse(slurp(d + "/rank0/manifest.json"));
    m["allreduce_order"]["sizes"][0]["n"] = int64_t{1} << 40;
    write(d + "/rank0/manifest.json", m.dump());
  }, "allreduce_order n = 1099511627776 is outside [1, 6]");
  expect_refused("strides_overlap", [](const std::string& d) {
    json m = json::parse(slurp(d + "/rank0/manifest.json"));
    m["params"][0]["strides"] = {1, 1};
    write(d + "/rank0/manifest.json", m.dump());
  }, "strides of 'w' [1, 1] do not lay out its 4 elements densely");
  expect_refused("forward_unknown", [](const std::string& d) {
    const std::string p = d + "/rank1/step000000.safetensors";
    fuzz::Parts parts = fuzz::split(slurp(p));
    json h = json::parse(parts.header);
    json meta = json::parse(h["__metadata__"]["ddplab"].get<std::string>());
    meta["backwards"][0]["forward"] = "hook";
    h["__metadata__"]["ddplab"] = meta.dump();
    parts.header = h.dump();
    write(p, parts.bytes());
  }, "a backward's \"forward\" is 'hook'");
  expect_refused("outside_unknown", [](const std::string& d) {
    json m = json::parse(slurp(d + "/rank0/manifest.json"));
    m["outside_params"][0]["name"] = "other";
    write(d + "/rank0/manifest.json", m.dump());
  }, "\"outside\" names 'frozen'");
  expect_refused("huge_world", [](const std::string& d) {
    json m = json::parse(slurp(d + "/rank0/manifest.json"));
    m["world_size"] = 1000000000;
    write(d + "/rank0/manifest.json", m.dump());
  }, "world_size = 1000000000 is outside");
}

// A real FSDP2 run (tests/golden/fsdp2_trace, its command in tests/golden/README.md): 3 ranks, layers of 40, 33
// and 5 rows, two micro-batches per step. Every sharded gradient and every shard after the step bit for bit.
std::string fsdp_trace() { return "tests/golden/fsdp2_trace"; }
std::string hand_trace() { return "tests/golden/hand_trace"; }

// A copy of a recorded trace in the test's temporary directory, writable (the runfiles' are read-only).
std::string writable_copy(const std::string& trace, const std::string& name) {
  const std::string dir = testing::temp_dir() + "/" + name;
  fs::remove_all(dir);
  fs::copy(trace, dir, fs::copy_options::recursive);
  for (const auto& e : fs::recursive_directory_iterator(dir))
    fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add);
  return dir;
}

// Each of the 3 ranks' manifests in `dir` made a ZeRO-1 share: rank r's optimizer owns parameters r and r + 3.
void give_shares(const std::string& dir) {
  for (int r = 0; r < 3; ++r) {
    const std::string p = dir + "/rank" + std::to_string(r) + "/manifest.json";
    json m = json::parse(slurp(p));
    m["optimizer"]["sharded"] = {{"by", "ShardedOptimizer"}, {"attribute", "local"}, {"owned", {r, r + 3}}};
    write(p, m.dump());
  }
}

// A sync written by hand, recorded (tests/golden/README.md: buckets of flat buffers, async all-reduces waited, two
// micro-batches a step, 3 ranks): every collective replayed and every gradient the optimizer stepped with explained
// bit for bit, without torch; the averaging named; the values against DDP's from the same local gradients counted.
TEST(CheckTrace, RecordedHandSyncIsReplayedBitForBit) {
  const check::CheckResult r = check::check_run(check::open_run(hand_trace()));
  EXPECT_FALSE(r.problems());
  ASSERT_TRUE(r.hand.present);
  EXPECT_EQ(r.hand.steps, 2);
  EXPECT_EQ(r.hand.collectives, 4);  // two buckets a step
  EXPECT_EQ(r.hand.replayed, 4);
  EXPECT_EQ(r.hand.exact, 4);
  EXPECT_EQ(r.grads.checked, 2 * 3 * 6);  // steps x ranks x parameters
  EXPECT_EQ(r.grads.exact, r.grads.checked);
  EXPECT_EQ(r.params.exact, 2 * 3 * 6);
  EXPECT_EQ(r.hand.averaging, "SUM then / world_size, in 2 buffers (buckets)");
  EXPECT_EQ(r.hand.values, 2 * 3 * 715);
  EXPECT_EQ(r.hand.values_different, 0);
  EXPECT_LT(r.hand.values_exact, r.hand.values);  // three ranks: not all of DDP's bits
  EXPECT_EQ(r.hand.vs_ddp.checked, 2 * 3 * 6);
}

// Rank 1's first collective made a broadcast where the others all-reduce: the ranks called different collectives
// (each call pairs with the others' call at its position), named at the step and rank, and nothing replayed there.
TEST(CheckTrace, HandSyncCollectivesThatDifferAcrossRanksAreNamed) {
  const std::string dir = writable_copy(hand_trace(), "hand_differ");
  const std::string file = dir + "/rank1/step000000.safetensors";
  fuzz::Parts p = fuzz::split(slurp(file));
  json header = json::parse(p.header);
  json meta = json::parse(header["__metadata__"]["ddplab"].get<std::string>());
  meta["collectives"][0]["op"] = "broadcast";
  meta["collectives"][0].erase("reduce_op");
  meta["collectives"][0]["src"] = 0;
  header["__metadata__"]["ddplab"] = meta.dump();
  p.header = header.dump();
  write(file, p.bytes());
  const check::CheckResult r = check::check_run(check::open_run(dir));
  EXPECT_TRUE(r.problems());
  EXPECT_EQ(r.hand.collectives, 2);  // step 1's: step 0's were not replayed
  bool named = false;
  for (const check::Finding& f : r.findings)
    named = named || (f.kind == "hand-sync" && f.cause == "collectives-differ" && f.step == 0 && f.rank == 1);
  EXPECT_TRUE(named);
}

// One bit of what rank 1's optimizer stepped with flipped: no arithmetic ddp_check models turns the all-reduce's
// result into it, a note says so.
TEST(CheckTrace, HandSyncGradientNoArithmeticExplainsIsNoted) {
  const std::string dir = writable_copy(hand_trace(), "hand_unexplained");
  const std::string file = dir + "/rank1/step000000.safetensors";
  std::string bytes = slurp(file);
  fuzz::Parts p = fuzz::split(bytes);
  const size_t at = 8 + p.header.size() + json::parse(p.header).at("grad_step/module.0.bias").at("data_offsets")[0].get<size_t>();
  bytes[at] = static_cast<char>(bytes[at] ^ 1);
  write(file, bytes);
  const check::CheckResult r = check::check_run(check::open_run(dir));
  bool noted = false;
  for (const check::Finding& f : r.findings)
    noted = noted || (f.kind == "hand-sync" && f.cause == "not-explained" && f.step == 0 && f.rank == 1 &&
                      f.name == "module.0.bias" && f.severity == "note");
  EXPECT_TRUE(noted);
}

// One bit of one rank's recorded all-reduce result flipped: the replay names that collective, step and rank.
TEST(CheckTrace, HandSyncCollectiveOtherThanGlooIsNamed) {
  const std::string dir = writable_copy(hand_trace(), "hand_flipped");
  const std::string file = dir + "/rank1/step000000.safetensors";
  std::string bytes = slurp(file);
  fuzz::Parts p = fuzz::split(bytes);
  const json header = json::parse(p.header);
  const size_t at = 8 + p.header.size() + header.at("coll/1/out").at("data_offsets")[0].get<size_t>();
  bytes[at] = static_cast<char>(bytes[at] ^ 1);
  write(file, bytes);
  const check::CheckResult r = check::check_run(check::open_run(dir));
  EXPECT_TRUE(r.problems());
  EXPECT_EQ(r.hand.exact, 3);
  bool named = false;
  for (const check::Finding& f : r.findings)
    named = named || (f.kind == "hand-sync" && f.cause == "collective-not-as-predicted" && f.step == 0 && f.rank == 1);
  EXPECT_TRUE(named);
}

// A sharded optimizer's manifest ("optimizer"."sharded", ZeRO-1) that cannot be: one line naming the file.
TEST(CheckTrace, BadShardedOptimizerManifestsGetOneLine) {
  const auto refused = [](const char* label, const std::function<void(json&, int)>& tamper, const std::string& expect) {
    const std::string dir = writable_copy(hand_trace(), label);
    for (int r = 0; r < 3; ++r) {
      const std::string p = dir + "/rank" + std::to_string(r) + "/manifest.json";
      json m = json::parse(slurp(p));
      tamper(m, r);
      write(p, m.dump());
    }
    expect_refused(dir, label, expect);
  };
  const auto share = [](json& m, int r) {
    m["optimizer"]["sharded"] = {{"by", "ShardedOptimizer"}, {"attribute", "local"}, {"owned", {r, r + 3}}};
  };
  refused("zero1_not_object", [](json& m, int) { m["optimizer"]["sharded"] = 5; }, "optimizer.sharded is 5, not an object");
  refused("zero1_index", [&](json& m, int r) { share(m, r); m["optimizer"]["sharded"]["owned"].push_back(99); }, "outside");
  refused("zero1_no_owned", [&](json& m, int r) { share(m, r); m["optimizer"]["sharded"].erase("owned"); }, "owned");
  refused("zero1_one_rank", [&](json& m, int r) { if (r == 1) share(m, r); }, "sharded on some ranks only");
}

// The same trace with each rank's optimizer made a ZeRO-1 share of it (rank r owns parameters r and r + 3; the
// groups left whole, so every rank predicts every parameter): the owner's prediction is every rank's, bit for bit,
// and the sharding is said.
TEST(CheckTrace, ShardedOptimizerOwnersStepIsEveryRanks) {
  const std::string dir = writable_copy(hand_trace(), "zero1_shares");
  give_shares(dir);
  const check::CheckResult r = check::check_run(check::open_run(dir));
  EXPECT_FALSE(r.problems()) << check::format_text(r);
  EXPECT_GT(r.params.checked, 0);
  EXPECT_EQ(r.params.exact, r.params.checked);
  EXPECT_NE(r.zero1.find("(rank 0: 2, rank 1: 2, rank 2: 2)"), std::string::npos) << r.zero1;
  EXPECT_NE(check::format_text(r).find("optimizer: ZeRO-1: ShardedOptimizer's SGD"), std::string::npos);
}

TEST(CheckTrace, RecordedFsdp2RunIsAsPredictedBitForBit) {
  const check::CheckResult r = check::check_run(check::open_run(fsdp_trace()));
  EXPECT_TRUE(r.sharded);
  EXPECT_FALSE(r.problems());
  EXPECT_EQ(r.grads.checked, 2 * 3 * 6);  // steps x ranks x parameters
  EXPECT_EQ(r.grads.exact, r.grads.checked);
  EXPECT_EQ(r.params.exact, 2 * 3 * 6);
  EXPECT_NE(r.buckets.find("3 parameter groups"), std::string::npos) << r.buckets;
}

// Its --report page says what is true of FSDP: FSDP's semantics, the shards lane green (checked, as predicted: not
// the grey of a rank that took no part), no sentence that the ranks' .grad should be equal (each is its own shard).
TEST(CheckTrace, Fsdp2ReportSaysFsdp) {
  const check::CheckResult r = check::check_run(check::open_run(fsdp_trace()));
  const std::string page = check::format_html(r);
  EXPECT_NE(page.find("Where the run first left FSDP's semantics"), std::string::npos);
  EXPECT_EQ(page.find("DDP's semantics"), std::string::npos);
  EXPECT_EQ(page.find("DDP did not leave the same average"), std::string::npos);
  const size_t lane = page.find("shards: each rank&#39;s shards changed by its own optimizer step alone");
  ASSERT_NE(lane, std::string::npos);
  EXPECT_NE(page.rfind("fill=\"#bfe6c6\"", lane), std::string::npos);  // green
  EXPECT_NE(page.find("FSDP&#39;s reduced gradient (all ranks&#39; shards of .grad)"), std::string::npos);
  // The legend's sentences whole (no "amberThe bottom row"), and the norm chart FSDP's.
  EXPECT_NE(page.find("unsharded gradients, amber where close but not bit for bit"), std::string::npos);
  EXPECT_NE(page.find("no replicas to compare); the red marker stands at the first step"), std::string::npos);
  EXPECT_NE(page.find("each rank's own gradient against FSDP's average"), std::string::npos);
  EXPECT_EQ(page.find("against DDP's average"), std::string::npos);
}

TEST(CheckTrace, BadFsdpManifestsGetOneLine) {
  const auto refused = [](const char* label, const std::function<void(json&)>& tamper, const std::string& expect) {
    const std::string dir = testing::temp_dir() + "/fsdp_" + label;
    fs::remove_all(dir);
    fs::copy(fsdp_trace(), dir, fs::copy_options::recursive);
    for (auto& e : fs::directory_iterator(dir)) fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add);
    const std::string p = dir + "/rank1/manifest.json";
    fs::permissions(p, fs::perms::owner_write, fs::perm_options::add);
    json m = json::parse(slurp(p));
    tamper(m);
    write(p, m.dump());
    expect_refused(dir, label, expect);
  };
  refused("shard_rows", [](json& m) { m["params"][2]["shape"] = {12, 40}; },
          "'2.weight': rank 1's shard is not the rows FSDP gives it of a 33-row parameter at world_size 3");
  refused("two_groups", [](json& m) { m["fsdp"]["groups"][1]["params"].push_back(0); }, "'0.weight' is in 2 FSDP groups");
  refused("group_index", [](json& m) { m["fsdp"]["groups"][0]["params"] = {0, 99}; }, "outside");
  refused("fewer_params", [](json& m) { m["fsdp"]["params"].erase(5); }, "fsdp.params does not list the same parameters");
  refused("full_shape", [](json& m) { m["fsdp"]["params"][0]["shape"] = {41, 12}; }, "differs from rank 0's");
}

// A step's file moved into its rank's steps.log, as the recorder appends a whole-run step: a frame (the record's
// byte count and its step, little-endian uint64 each), then the file's bytes.
void to_steps_log(const std::string& dir, int rank, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "/rank%d/step%06d.safetensors", rank, static_cast<int>(step));
  const std::string bytes = slurp(dir + name);
  std::string frame(16, '\0');
  for (int i = 0; i < 8; ++i) {
    frame[static_cast<size_t>(i)] = static_cast<char>((bytes.size() >> (8 * i)) & 0xff);
    frame[static_cast<size_t>(8 + i)] = static_cast<char>((static_cast<uint64_t>(step) >> (8 * i)) & 0xff);
  }
  std::ofstream(dir + "/rank" + std::to_string(rank) + "/steps.log", std::ios::binary | std::ios::app) << frame << bytes;
  fs::remove(dir + name);
}

// The whole-run steps in steps.log read as their own files are: the same sample and sums. A last record cut
// short (killed while writing) is left out; a rank whose manifest was not completed picks up the whole records
// after its last listed step (the manifest is rewritten at most once a second); steps out of order are refused.
TEST(CheckTrace, WholeRunStepsAreReadFromStepsLog) {
  const auto whole = [](const std::string& name) { return make_trace(testing::temp_dir() + "/" + name, false, false, true); };
  const auto expect_whole_step = [](const std::string& dir, const char* label) {
    const check::CheckResult r = check::check_run(check::open_run(dir));
    std::printf("%s: %s", label, check::format_text(r).c_str());
    EXPECT_FALSE(r.problems()) << label;
    EXPECT_EQ(r.sampled.steps, 1) << label;
    EXPECT_EQ(r.sampled.exact, 8) << label;
    EXPECT_EQ(r.wsum.within, 4) << label;
  };
  const std::string log = whole("log");
  for (int r = 0; r < 2; ++r) to_steps_log(log, r, 2);
  expect_whole_step(log, "steps.log");
  std::ofstream(log + "/rank1/steps.log", std::ios::binary | std::ios::app) << std::string("\x10\x27\0\0\0\0\0\0\x03", 9);
  expect_whole_step(log, "a record cut short");

  const std::string killed = whole("killed");
  for (int r = 0; r < 2; ++r) {
    to_steps_log(killed, r, 2);
    json m = json::parse(slurp(killed + "/rank" + std::to_string(r) + "/manifest.json"));
    m["steps"] = {0, 1};
    m["complete"] = false;
    write(killed + "/rank" + std::to_string(r) + "/manifest.json", m.dump());
  }
  expect_whole_step(killed, "listed up to step 1, not completed");

  const std::string unordered = whole("unordered");
  to_steps_log(unordered, 1, 2);
  to_steps_log(unordered, 1, 1);
  expect_refused(unordered, "unordered", "steps.log holds ascending steps");
}

// The fuzzer: mutations of a valid trace's manifest (JSON-level) and step files (byte- and JSON-level).
TEST(CheckTrace, FuzzedTracesEndInTraceErrorOrAResult) {
  constexpr int kCases = 1500;
  fuzz::Rng rng(fuzz::kSeed);
  const std::string base = make_trace(testing::temp_dir() + "/base", false, false, true);  // with a whole-run step
  const std::vector<std::string> files = {"/rank0/manifest.json", "/rank1/manifest.json", "/rank0/step000000.safetensors",
                                          "/rank1/step000001.safetensors", "/rank0/step000002.safetensors"};
  int refused = 0, loaded = 0;
  for (int c = 0; c < kCases; ++c) {
    const std::string dir = testing::temp_dir() + "/case";
    fs::remove_all(dir);
    // One case in four mutates the recorded FSDP2 run (its "fsdp" section, local gradients of full shape), one in
    // four the recorded sync written by hand (its "collectives" and coll/ tensors; half of those as a ZeRO-1 run).
    const uint64_t which = fuzz::pick(rng, 4);
    const bool fsdp = which == 0, hand = which == 1;
    fs::copy(fsdp ? fsdp_trace() : hand ? hand_trace() : base, dir, fs::copy_options::recursive);
    for (const auto& e : fs::recursive_directory_iterator(dir))
      fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add);
    // One case in four of the others: the whole-run step in steps.log, which is then what is mutated.
    const bool in_log = which == 2;
    if (in_log) to_steps_log(dir, 0, 2);
    // Half the hand-written cases first make each rank's optimizer a ZeRO-1 share ("optimizer"."sharded").
    if (hand && fuzz::pick(rng, 2) == 0) give_shares(dir);
    // The FSDP2 run has no step 2 (the whole-run step is the hand-made run's).
    const std::string file = dir + (in_log                ? std::string("/rank0/steps.log")
                                    : fsdp || hand ? files[static_cast<size_t>(fuzz::pick(rng, 4))]
                                                   : fuzz::pick(rng, files));
    std::string bytes = slurp(file), what;
    if (in_log) {
      what = fuzz::mutate_bytes(rng, bytes, 24 + fuzz::split(bytes.substr(16)).header.size());  // frame, header
    } else if (file.find("manifest") != std::string::npos) {
      fuzz::Parts p{bytes, ""};
      what = fuzz::mutate_header(rng, p, fuzz::pick(rng, 2) == 0);
      bytes = p.header;
    } else if (fuzz::pick(rng, 2) == 0) {
      fuzz::Parts p = fuzz::split(bytes);
      what = fuzz::mutate_header(rng, p, true);
      bytes = p.bytes();
    } else {
      what = fuzz::mutate_bytes(rng, bytes, 8 + fuzz::split(bytes).header.size());
    }
    write(file, bytes);
    g_largest = 0;
    try {
      check::check_run(check::open_run(dir));
      ++loaded;
    } catch (const check::TraceError&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "case " << c << " (" << file << ": " << what << "): " << typeid(e).name() << ": " << e.what();
    }
    ASSERT_LE(g_largest.load(), fuzz::kMaxAlloc) << "case " << c << ": " << what;
  }
  std::printf("fuzz traces: %d cases, %d refused cleanly, %d checked, 0 crashes\n", kCases, refused, loaded);
  EXPECT_GT(refused, kCases / 4);
}

}  // namespace
}  // namespace ddplab
