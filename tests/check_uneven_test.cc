// ddp_check on hand-made traces of 4 ranks (no torch): ranks that take different numbers of steps (Join,
// and without it), a rank whose backward skipped DDP's all-reduce, the run-level mistakes (nothing trains,
// an optimizer over other tensors) and the data the samplers yielded (rank{r}/data.json). Every value is a
// multiple of 1/4 and small, so each average is exact in any order of addition (nccl-tests' choice): the
// expected gradients are written here without modelling Gloo's ring. Real torch runs of the same cases are
// in ddp_check_test; this suite pins the checker's logic and runs under the sanitizers.
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "src/check/check.h"
#include "tests/fuzz.h"
#include "tests/testing.h"

namespace ddplab {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
constexpr int kWs = 4;

void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string step_file(const std::map<std::string, std::vector<float>>& tensors, const json& meta) {
  json header = json::object();
  std::string data;
  for (const auto& [name, v] : tensors) {
    header[name] = {{"dtype", "F32"}, {"shape", {v.size()}}, {"data_offsets", {data.size(), data.size() + 4 * v.size()}}};
    data += std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  }
  header["__metadata__"] = {{"ddplab", meta.dump()}};
  return fuzz::le64(header.dump().size()) + header.dump() + data;
}

// One DDP iteration of the hand-made run: which ranks ran it, which of them all-reduced, and the Join
// segment it belongs to.
struct Iteration {
  int64_t segment, index;
  std::vector<bool> ran = std::vector<bool>(kWs, true);
  std::vector<bool> sync = std::vector<bool>(kWs, true);
  // The forward the recorder saw before each rank's backward: "" DDP's, "module" ddp_model.module(x), "none".
  std::vector<std::string> forward = std::vector<std::string>(kWs);
  bool join = false;
};

struct Options {
  bool zero_grads = false;
  bool elide = false;  // leave out what the recorder leaves out where implied (param_before, grad_step, zero priors)
  // Also keep .grad, param_after and the state as CRC-32 digests after each rank's first step (the
  // recorder's default); `tamper` flips one digest's lowest bit: {kind, step, rank}.
  bool digests = false;
  std::tuple<std::string, int64_t, int> tamper = {"", -1, -1};
  bool momentum = false;  // SGD with momentum 0.5: a momentum_buffer state to carry from step to step
  json missing_params = json::array();
  bool other_optimizer = false;  // a second optimizer steps the missing parameters after the traced one
  std::vector<bool> complete = std::vector<bool>(kWs, true);
};

// One parameter w of 4 floats, SGD lr 0.5. Rank r's local gradient at iteration i is (r + i + k) / 4 for
// element k; DDP's .grad on a rank that all-reduced is the sum over the ranks that ran, times 1/4 (a joined
// rank adds zeros); a rank that skipped the all-reduce keeps its own gradient.
std::string make_run(const std::string& dir, const std::vector<Iteration>& its, const Options& o = {}) {
  fs::remove_all(dir);
  std::vector<std::vector<float>> w(kWs, std::vector<float>{1.0f, -2.0f, 0.5f, 0.25f});
  std::vector<int64_t> step(kWs, 0);
  std::vector<json> steps(kWs, json::array());
  std::vector<std::vector<float>> buf(kWs);  // momentum buffers (empty before the first step)
  for (int r = 0; r < kWs; ++r) fs::create_directories(dir + "/rank" + std::to_string(r));
  for (size_t i = 0; i < its.size(); ++i) {
    const Iteration& it = its[i];
    std::vector<std::vector<float>> local(kWs, std::vector<float>(4));
    std::vector<float> avg(4, 0.0f);
    for (int r = 0; r < kWs; ++r)
      for (int k = 0; k < 4; ++k) {
        local[r][k] = o.zero_grads ? 0.0f : static_cast<float>(r + static_cast<int>(i) + k) / 4.0f;
        if (it.ran[r]) avg[k] += local[r][k] * 0.25f;
      }
    // Join's final broadcast at the end of a Join segment: from the rank with the most steps (larger on a tie).
    if (i > 0 && its[i - 1].join && its[i - 1].segment != it.segment) {
      int auth = 0;
      for (int r = 0; r < kWs; ++r)
        if (step[r] >= step[auth]) auth = r;
      for (int r = 0; r < kWs; ++r) w[r] = w[auth];
    }
    for (int r = 0; r < kWs; ++r) {
      if (!it.ran[r]) continue;
      const std::vector<float> seen = it.sync[r] ? avg : local[r];
      std::vector<float> after(4), buf_after = seen;
      for (int k = 0; k < 4; ++k) {
        if (o.momentum && !buf[r].empty()) buf_after[k] = 0.5f * buf[r][k] + seen[k];
        after[k] = o.missing_params.empty() ? w[r][k] - 0.5f * (o.momentum ? buf_after[k] : seen[k]) : w[r][k];
      }
      json meta = {{"step", step[r]}, {"rank", r}, {"run_id", "u"}, {"segment", {it.segment, it.index}},
                   {"backwards", {{{"sync", static_cast<bool>(it.sync[r])}, {"ready", {0}}}}}, {"lr", {0.5}}};
      if (it.join) meta["join"] = {{"divide_by_initial_world_size", true}};
      if (!it.forward[r].empty()) meta["backwards"][0]["forward"] = it.forward[r];
      std::map<std::string, std::vector<float>> t = {{"local/0/w", local[r]}, {"grad_step/w", seen},
                                                     {"param_before/w", w[r]}, {"param_after/w", after},
                                                     {"prior/w", std::vector<float>(4, 0.0f)}};
      if (it.sync[r]) t["grad/w"] = avg;
      if (o.momentum && !buf[r].empty()) t["state/w/momentum_buffer"] = buf[r];
      if (o.elide || o.digests) {
        meta["elided"] = {{"prior_zero", {"w"}}};
        t.erase("prior/w");
        if (it.sync[r]) t.erase("grad_step/w"), meta["elided"]["grad_step"] = "grad";
        if (step[r] > 0 && !(i > 0 && its[i - 1].join && its[i - 1].segment != it.segment))
          t.erase("param_before/w"), meta["elided"]["param_before"] = "previous";
      }
      if (o.digests && step[r] > 0) {
        for (const char* kind : {"grad/w", "param_after/w", "state/w/momentum_buffer"}) {
          if (!t.count(kind)) continue;
          uint32_t d = check::crc32_of(t.at(kind));
          if (std::get<0>(o.tamper) + "/w" == kind && std::get<1>(o.tamper) == step[r] && std::get<2>(o.tamper) == r) d ^= 1u;
          meta["crc32"][kind] = d;
          t.erase(kind);
        }
      }
      char name[64];
      std::snprintf(name, sizeof name, "/rank%d/step%06lld.safetensors", r, static_cast<long long>(step[r]));
      write(dir + name, step_file(t, meta));
      steps[r].push_back(step[r]++);
      w[r] = after;
      if (o.momentum) buf[r] = buf_after;
      if (o.other_optimizer)
        for (int k = 0; k < 4; ++k) w[r][k] -= 0.5f * seen[k];
    }
  }
  for (int r = 0; r < kWs; ++r) {
    const json manifest = {
        {"format", "ddplab-trace"}, {"version", 1}, {"run_id", "u"}, {"rank", r}, {"world_size", kWs},
        {"backend", "gloo"}, {"torch_version", "test"}, {"every", 1}, {"steps", steps[r]},
        {"complete", static_cast<bool>(o.complete[r])}, {"ddp", {{"bucket_cap_mb", 25.0}}},
        {"params", {{{"name", "w"}, {"shape", {4}}, {"dtype", "float32"}}}},
        {"optimizer", {{"class", "SGD"}, {"param_groups", {{{"params", o.missing_params.empty() ? json{0} : json::array()},
                                                            {"lr", 0.5}, {"momentum", o.momentum ? 0.5 : 0.0}}}},
                       {"missing_params", o.missing_params}, {"foreign_params", o.missing_params.empty() ? 0 : 1}}},
        {"first_ready_order", {0}}};
    write(dir + "/rank" + std::to_string(r) + "/manifest.json", manifest.dump(1));
  }
  return dir;
}

check::CheckResult check_dir(const std::string& dir) {
  const check::CheckResult r = check::check_run(check::open_run(dir));
  std::printf("%s", check::format_text(r).c_str());
  return r;
}

const check::Finding* find(const check::CheckResult& r, const std::string& kind, const std::string& cause = "*") {
  for (const check::Finding& f : r.findings)
    if (f.kind == kind && (cause == "*" || f.cause == cause)) return &f;
  return nullptr;
}

// Join([ddp]) around a loop where rank 3 has 1 batch, rank 2 has 2, ranks 0 and 1 have 3; then one step
// of a second loop after the Join, which starts from Join's final broadcast of rank 1's parameters.
std::vector<Iteration> uneven_join() {
  std::vector<Iteration> its;
  for (int64_t k = 0; k < 3; ++k) {
    Iteration it{1, k};
    it.join = true;
    it.ran = {true, true, k < 2, k < 1};
    its.push_back(it);
  }
  its.push_back(Iteration{2, 0});
  return its;
}

TEST(CheckUneven, JoinedRanksShadowWithZerosAndTheRunIsAsPredicted) {
  const check::CheckResult r = check_dir(make_run(testing::temp_dir() + "/join", uneven_join()));
  EXPECT_FALSE(r.problems());
  EXPECT_EQ(r.grads.checked, 4 + 3 + 2 + 4);  // the ranks that ran each iteration, one parameter each
  EXPECT_EQ(r.grads.exact, r.grads.checked);
  EXPECT_EQ(r.params.exact, r.params.checked);
  ASSERT_EQ(r.lines.size(), 4u);
  EXPECT_EQ(r.lines[2].ran, (std::vector<bool>{true, true, false, false}));
}

// The recorder leaves out what is implied; the checker rebuilds it and says the same.
TEST(CheckUneven, ElidedTensorsAreRebuilt) {
  Options lean;
  lean.elide = true;
  const check::CheckResult full = check_dir(make_run(testing::temp_dir() + "/full", uneven_join()));
  const check::CheckResult r = check_dir(make_run(testing::temp_dir() + "/lean", uneven_join(), lean));
  EXPECT_FALSE(r.problems());
  EXPECT_EQ(r.grads.exact, full.grads.exact);
  EXPECT_EQ(r.params.exact, full.params.exact);
  EXPECT_EQ(r.params.checked, full.params.checked);
  EXPECT_EQ(check::format_text(r).substr(check::format_text(r).find("step    0")),
            check::format_text(full).substr(check::format_text(full).find("step    0")));
}

std::vector<Iteration> even(int n) {
  std::vector<Iteration> its;
  for (int i = 0; i < n; ++i) its.push_back(Iteration{0, i});
  return its;
}

// Digests after each rank's first step (the recorder's default): the prediction stands for the values, the
// momentum buffer is carried from step to step, and the verdict is the full trace's.
TEST(CheckUneven, DigestsAreComparedWithThePredictionAndCarriedForward) {
  Options full, dig;
  full.momentum = dig.momentum = true;
  dig.digests = true;
  const check::CheckResult f = check_dir(make_run(testing::temp_dir() + "/dfull", even(4), full));
  const check::CheckResult r = check_dir(make_run(testing::temp_dir() + "/dig", even(4), dig));
  EXPECT_FALSE(r.problems());
  EXPECT_EQ(r.grads.checked, 16);
  EXPECT_EQ(r.grads.exact, 16);
  EXPECT_EQ(r.params.checked, 16);
  EXPECT_EQ(r.params.exact, 16);
  EXPECT_EQ(check::format_text(r).substr(check::format_text(r).find("step    0")),
            check::format_text(f).substr(check::format_text(f).find("step    0")));
}

// A parameter whose digest after the step is not the prediction's: named at its step and rank, the cmp table
// says it cannot show by how much, and the next step of that rank is not predicted (its input is unknown).
TEST(CheckUneven, ADigestThatDiffersIsNamedWithoutValues) {
  Options o;
  o.momentum = o.digests = true;
  o.tamper = {"param_after", 2, 1};
  const check::CheckResult r = check_dir(make_run(testing::temp_dir() + "/dparam", even(4), o));
  const check::Finding* f = find(r, "step-not-as-predicted");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, "problem");
  EXPECT_EQ(f->step, 2);
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->name, "w");
  EXPECT_NE(f->message.find("CRC-32"), std::string::npos) << f->message;
  EXPECT_EQ(r.first_divergence.step, 2);
  EXPECT_TRUE(r.first_divergence.rows.empty());
  EXPECT_NE(r.first_divergence.missing.find("full=True"), std::string::npos);
  const check::Finding* later = find(r, "not-checked", "digest");
  ASSERT_NE(later, nullptr);
  EXPECT_EQ(later->step, 3);
  EXPECT_EQ(later->rank, 1);
  EXPECT_EQ(r.params.different, 1);
  EXPECT_EQ(r.params.exact, 14);  // rank 1's step 3 is not predicted

  Options g = o;
  g.tamper = {"grad", 1, 2};
  const check::CheckResult rg = check_dir(make_run(testing::temp_dir() + "/dgrad", even(3), g));
  const check::Finding* fg = find(rg, "grad-not-as-predicted");
  ASSERT_NE(fg, nullptr);
  EXPECT_EQ(fg->severity, "problem");
  EXPECT_EQ(fg->step, 1);
  EXPECT_EQ(fg->rank, 2);
  EXPECT_EQ(rg.grads.different, 1);
}

TEST(CheckUneven, MalformedDigestsAreBadInput) {
  Options o;
  o.digests = true;
  const std::string dir = make_run(testing::temp_dir() + "/dbad", even(2), o);
  const std::string path = dir + "/rank0/step000001.safetensors";
  std::ifstream in(path, std::ios::binary);
  const fuzz::Parts good = fuzz::split(std::string(std::istreambuf_iterator<char>(in), {}));
  const auto with_meta = [&](const std::function<void(json&)>& change) {
    json header = json::parse(good.header);
    json meta = json::parse(header["__metadata__"]["ddplab"].get<std::string>());
    change(meta);
    header["__metadata__"]["ddplab"] = meta.dump();
    write(path, fuzz::Parts{header.dump(), good.data}.bytes());
  };
  for (const auto& [change, says] : std::vector<std::pair<std::function<void(json&)>, std::string>>{
           {[](json& m) { m["crc32"] = "abc"; }, "\"crc32\" is not an object"},
           {[](json& m) { m["crc32"]["grad/w"] = "abc"; }, "is not an integer"},
           {[](json& m) { m["crc32"]["grad/w"] = 1LL << 33; }, "is outside"},
           {[](json& m) { m["crc32"]["local/0/w"] = 1; }, "not of grad/, param_after/ or state/"},
           {[](json& m) { m["crc32"]["grad/v"] = 1; }, "names no parameter"},
           {[](json& m) { m["crc32"].erase("param_after/w"); }, "has no param_after/w"},
       }) {
    with_meta(change);
    try {
      check::check_run(check::open_run(dir));
      ADD_FAILURE() << "accepted: " << says;
    } catch (const check::TraceError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

TEST(CheckUneven, WithoutJoinADroppedRankIsAProblemNotBadInput) {
  std::vector<Iteration> its = {Iteration{0, 0}, Iteration{0, 1}, Iteration{0, 2}};
  its[1].ran[3] = its[2].ran[3] = false;
  Options o;
  o.complete[3] = false;
  const check::CheckResult r = check_dir(make_run(testing::temp_dir() + "/uneven", its, o));
  const check::Finding* f = find(r, "uneven-steps");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, "problem");
  EXPECT_EQ(f->rank, 3);
  EXPECT_EQ(f->step, 1);
  EXPECT_NE(find(r, "recording-stopped", "incomplete"), nullptr);  // rank 3 did not reach close()
}

TEST(CheckUneven, ABackwardWithoutAllReduceIsNamedAtItsStepAndRank) {
  std::vector<Iteration> its = {Iteration{0, 0}, Iteration{0, 1}, Iteration{0, 2}};
  its[1].sync[2] = false;  // rank 2 called ddp_model.module(x): the recorder saw the module's forward alone
  its[1].forward[2] = "module";
  const check::CheckResult r = check_dir(make_run(testing::temp_dir() + "/module", its));
  const check::Finding* f = find(r, "not-all-reduced", "module-call");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rank, 2);
  EXPECT_EQ(f->step, 1);
  EXPECT_NE(f->message.find("ddp_model.module(x)"), std::string::npos);
  EXPECT_EQ(find(r, "not-all-reduced", "no-sync"), nullptr);  // named once, for what it was
  EXPECT_EQ(r.grads.different, 0);  // the later steps are not predicted: no false grad-not-as-predicted
}

// The same backward under DDP's forward with no_sync() on that rank alone: no-sync, in no_sync's words.
TEST(CheckUneven, NoSyncOnOneRankIsNamedAsSuch) {
  std::vector<Iteration> its = {Iteration{0, 0}, Iteration{0, 1}, Iteration{0, 2}};
  its[1].sync[2] = false;
  const check::CheckResult r = check_dir(make_run(testing::temp_dir() + "/nosync_one", its));
  const check::Finding* f = find(r, "not-all-reduced", "no-sync");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rank, 2);
  EXPECT_EQ(f->step, 1);
  EXPECT_NE(f->message.find("no_sync() on this rank only"), std::string::npos) << f->message;
  EXPECT_EQ(find(r, "not-all-reduced", "module-call"), nullptr);
}

TEST(CheckUneven, NoAllReduceAnywhereIsBlamedOnGradients) {
  std::vector<Iteration> its = {Iteration{0, 0}, Iteration{0, 1}};
  for (Iteration& it : its) it.sync.assign(kWs, false);  // no_sync() around every forward and backward
  const check::CheckResult r = check_dir(make_run(testing::temp_dir() + "/nosync", its));
  const check::Finding* f = find(r, "replicas-diverged");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->cause, "gradients");
  EXPECT_EQ(f->step, 0);
}

TEST(CheckUneven, ZeroGradientsEverywhereMeanNothingTrains) {
  Options o;
  o.zero_grads = true;
  const check::CheckResult r = check_dir(make_run(testing::temp_dir() + "/zero", {Iteration{0, 0}, Iteration{0, 1}}, o));
  EXPECT_NE(find(r, "nothing-trains", "zero-gradients"), nullptr);
}

TEST(CheckUneven, AnOptimizerOverOtherTensorsIsNamed) {
  Options o;
  o.missing_params = {0};
  const check::CheckResult r = check_dir(make_run(testing::temp_dir() + "/copy", {Iteration{0, 0}}, o));
  const check::Finding* f = find(r, "optimizer-misses-parameters", "none");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->name, "w");
}

TEST(CheckUneven, ASecondOptimizerOverTheRestIsNotAMistake) {
  Options o;
  o.missing_params = {0};
  o.other_optimizer = true;
  const check::CheckResult r = check_dir(make_run(testing::temp_dir() + "/two_opt", {Iteration{0, 0}, Iteration{0, 1}}, o));
  EXPECT_FALSE(r.problems());
  EXPECT_NE(find(r, "not-checked", "other-optimizer"), nullptr);
}

// data.json: rank r's training loader over a base dataset of 16 samples, one epoch each of two iterations.
void write_data(const std::string& dir, const std::function<std::vector<int64_t>(int, int)>& indices,
                const std::function<std::string(int)>& digest, bool validation = false) {
  for (int r = 0; r < kWs; ++r) {
    json epochs = json::array();
    for (int e = 0; e < 2; ++e)
      epochs.push_back({{"iteration", e}, {"epoch", e}, {"indices", indices(r, e)}, {"training", true},
                        {"first_step", 2 * e}, {"last_step", 2 * e + 1}});
    json loaders = {{{"id", 0}, {"dataset", "Subset"}, {"base", "TensorDataset/16"}, {"subset_digest", digest(r)},
                     {"sampler", {{"type", "DistributedSampler"}, {"shuffle", true}}}, {"epochs", epochs}}};
    if (validation)
      loaders.push_back({{"id", 1}, {"dataset", "Subset"}, {"base", "TensorDataset/16"}, {"subset_digest", digest(r) + "v"},
                         {"sampler", {{"type", "SequentialSampler"}}},
                         {"epochs", {{{"iteration", 0}, {"indices", {(r + 1) % kWs * 4}}, {"training", false}}}}});
    write(dir + "/rank" + std::to_string(r) + "/data.json", json{{"loaders", loaders}}.dump());
  }
}

TEST(CheckUneven, DataLineSaysEachRankSawItsOwnSamples) {
  const std::string dir = make_run(testing::temp_dir() + "/data_ok", {Iteration{0, 0}});
  // Epoch e: rank r gets 4 samples of its own quarter, in a new order each epoch.
  write_data(dir, [](int r, int e) { return e ? std::vector<int64_t>{4 * r + 3, 4 * r + 2, 4 * r + 1, 4 * r}
                                              : std::vector<int64_t>{4 * r, 4 * r + 1, 4 * r + 2, 4 * r + 3}; },
             [](int) { return std::string(""); });
  const check::CheckResult r = check_dir(dir);
  EXPECT_FALSE(r.problems());
  EXPECT_EQ(r.data.source, "sampler");
  ASSERT_EQ(r.data.epochs.size(), 2u * kWs);
  for (const check::EpochLine& l : r.data.epochs) {
    EXPECT_EQ(l.seen, 4);
    EXPECT_EQ(l.distinct, 4);
    EXPECT_EQ(l.shared, 0);
    EXPECT_EQ(l.order_changed, l.iteration == 0 ? -1 : 1);
  }
  EXPECT_NE(r.data.verdict.find("its own samples"), std::string::npos);
  EXPECT_NE(check::format_json(r).find("\"shared\": 0"), std::string::npos);
}

TEST(CheckUneven, RepeatedSamplesNeitherHideNorFakeAnOverlap) {
  // Ranks 0 and 1 both train on samples 0..3 (an overlap by index), although every sample's content could be
  // the same: indices decide. Ranks' splits differ (digests), so the cause is random_split per rank.
  const std::string dir = make_run(testing::temp_dir() + "/data_overlap", {Iteration{0, 0}});
  write_data(dir, [](int r, int e) {
    const int64_t base = r == 1 ? 0 : 4 * r;
    return e ? std::vector<int64_t>{base + 1, base, base + 3, base + 2} : std::vector<int64_t>{base, base + 1, base + 2, base + 3};
  }, [](int r) { return "split" + std::to_string(r); }, true);
  const check::CheckResult r = check_dir(dir);
  const check::Finding* f = find(r, "overlapping-data", "random-split-per-rank");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->step, 0);
  EXPECT_NE(find(r, "validation-overlaps-training"), nullptr);
}

TEST(CheckUneven, TheSameOrderEveryEpochIsNamed) {
  const std::string dir = make_run(testing::temp_dir() + "/data_order", {Iteration{0, 0}});
  write_data(dir, [](int r, int) { return std::vector<int64_t>{4 * r + 2, 4 * r, 4 * r + 3, 4 * r + 1}; },
             [](int) { return std::string(""); });
  const check::CheckResult r = check_dir(dir);
  const check::Finding* f = find(r, "same-order-every-epoch");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->step, 2);  // the second epoch's first step
  EXPECT_EQ(find(r, "overlapping-data"), nullptr);
}

TEST(CheckUneven, MalformedDataJsonIsOneLine) {
  const std::string dir = make_run(testing::temp_dir() + "/data_bad", {Iteration{0, 0}});
  for (const char* bad : {"{", "[]", "{\"loaders\": [{\"epochs\": [{\"indices\": [-1]}]}]}", "{\"loaders\": [3]}"}) {
    write(dir + "/rank2/data.json", bad);
    try {
      check::check_run(check::open_run(dir));
      ADD_FAILURE() << bad << ": accepted";
    } catch (const check::TraceError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("rank2/data.json"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace ddplab
