#include "src/check/trace.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <zlib.h>

#include "src/base/flags.h"

namespace ddplab::check {
namespace {

using nlohmann::json;

constexpr size_t kMaxManifestBytes = 64 << 20;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw TraceError(escape_control(path + ": " + what));
}

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

json read_json_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, "missing (the rank did not call DDPTrace.close(), or this is not a trace directory)");
  if (!S_ISREG(st.st_mode)) fail(path, "is not a regular file");
  if (static_cast<size_t>(st.st_size) > kMaxManifestBytes)
    fail(path, fmt::format("{} bytes, over the limit of {} for a manifest", st.st_size, kMaxManifestBytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    fail(path, std::string("not valid JSON (") + e.what() + ")");
  }
}

// Typed field access: a missing or mistyped field is one line naming it.
const json& field(const json& j, const std::string& key, const std::string& path) {
  if (!j.is_object() || !j.contains(key)) fail(path, "has no \"" + key + "\"");
  return j.at(key);
}
std::string str(const json& j, const std::string& key, const std::string& path) {
  const json& v = field(j, key, path);
  if (!v.is_string()) fail(path, "\"" + key + "\" is not a string");
  return v.get<std::string>();
}
int64_t integer(const json& v, const std::string& what, const std::string& path, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) fail(path, what + " is not an integer");
  const auto x = v.get<int64_t>();
  if (x < lo || x > hi) fail(path, fmt::format("{} = {} is outside [{}, {}]", what, x, lo, hi));
  return x;
}
bool boolean(const json& j, const std::string& key, const std::string& path, bool def) {
  if (!j.contains(key) || j.at(key).is_null()) return def;
  if (!j.at(key).is_boolean()) fail(path, "\"" + key + "\" is not true or false");
  return j.at(key).get<bool>();
}
std::vector<size_t> indices(const json& v, const std::string& what, const std::string& path, size_t n) {
  if (!v.is_array()) fail(path, what + " is not a list");
  std::vector<size_t> out;
  for (const json& x : v) out.push_back(static_cast<size_t>(integer(x, what + " entry", path, 0, static_cast<int64_t>(n) - 1)));
  return out;
}

std::vector<TensorInfo> tensor_infos(const json& v, const std::string& what, const std::string& path) {
  if (!v.is_array()) fail(path, "\"" + what + "\" is not a list");
  if (v.size() > kMaxTensors) fail(path, fmt::format("{} {}, over the limit of {}", v.size(), what, kMaxTensors));
  std::vector<TensorInfo> out;
  std::set<std::string> seen;
  for (const json& t : v) {
    TensorInfo info;
    info.name = str(t, "name", path);
    if (!seen.insert(info.name).second) fail(path, what + " name '" + info.name + "' appears twice");
    const json& shape = field(t, "shape", path);
    if (!shape.is_array() || shape.size() > 8) fail(path, "shape of '" + info.name + "' is not a list of at most 8 sizes");
    info.numel = 1;
    for (const json& d : shape) {
      const int64_t s = integer(d, "a size of '" + info.name + "'", path, 0, int64_t{1} << 40);
      info.shape.push_back(s);
      if (s != 0 && info.numel > (int64_t{1} << 40) / s) fail(path, "'" + info.name + "' has over 2^40 elements");
      info.numel *= s;
    }
    if (t.contains("dtype") && t.at("dtype") != "float32")
      fail(path, "'" + info.name + "' is " + t.at("dtype").dump() + "; ddp_check reads float32 parameters only");
    out.push_back(std::move(info));
  }
  return out;
}

Manifest parse_manifest_fields(const std::string& path);

// The hyperparameters replay reads, typed: numbers, booleans, betas a pair of numbers; nulls dropped.
void check_param_groups(json& groups, size_t num_params, const std::string& path) {
  if (!groups.is_array() || groups.empty()) fail(path, "optimizer.param_groups is not a non-empty list");
  for (json& g : groups) {
    if (!g.is_object()) fail(path, "a param group is not an object");
    indices(field(g, "params", path), "a param group's params", path, num_params);
    for (auto it = g.begin(); it != g.end();) {
      if (it.value().is_null()) {
        it = g.erase(it);
        continue;
      }
      // Any other value is the optimizer's own (Adafactor's eps is a pair with a None): kept, and a step
      // whose hyperparameters ddp_check cannot read is not-checked (replay.cc), not bad input.
      ++it;
    }
  }
}

// PowerSGDState's fields the replay reads: integers, booleans, a number.
void check_hook_state(const json& s, const std::string& path) {
  if (!s.is_object()) fail(path, "ddp.comm_hook_state is not an object");
  for (const char* k : {"matrix_approximation_rank", "start_powerSGD_iter", "random_seed"})
    if (s.contains(k)) integer(s.at(k), std::string("comm_hook_state.") + k, path, 0, int64_t{1} << 40);
  for (const char* k : {"use_error_feedback", "warm_start"})
    if (s.contains(k) && !s.at(k).is_boolean()) fail(path, std::string("comm_hook_state.") + k + " is not true or false");
  if (s.contains("min_compression_rate") && !s.at("min_compression_rate").is_number())
    fail(path, "comm_hook_state.min_compression_rate is not a number");
}

Manifest parse_manifest(const std::string& path) {
  try {
    return parse_manifest_fields(path);
  } catch (const json::exception& e) {  // a field of an unexpected type the checks above did not name
    fail(path, std::string("unexpected content (") + e.what() + ")");
  }
}

Manifest parse_manifest_fields(const std::string& path) {
  const json j = read_json_file(path);
  Manifest m;
  m.path = path;
  if (!j.is_object() || j.value("format", "") != "ddplab-trace")
    fail(path, "not a ddplab trace manifest (\"format\" is not \"ddplab-trace\")");
  if (integer(field(j, "version", path), "version", path, 0, 1000) != 1)
    fail(path, "trace format version " + j.at("version").dump() + "; this ddp_check reads version 1");
  m.run_id = str(j, "run_id", path);
  m.world_size = static_cast<int>(integer(field(j, "world_size", path), "world_size", path, 1, kMaxWorldSize));
  m.rank = static_cast<int>(integer(field(j, "rank", path), "rank", path, 0, m.world_size - 1));
  m.backend = str(j, "backend", path);
  m.device = j.contains("device") && j.at("device").is_string() ? j.at("device").get<std::string>() : "cpu";
  m.torch_version = str(j, "torch_version", path);
  if (j.contains("not_recorded") && j.at("not_recorded").is_string()) {
    m.not_recorded = j.at("not_recorded").get<std::string>();
    return m;
  }
  m.every = integer(field(j, "every", path), "every", path, 1, kMaxSteps);
  const json& steps = field(j, "steps", path);
  if (!steps.is_array() || steps.size() > static_cast<size_t>(kMaxSteps)) fail(path, "\"steps\" is not a list of step numbers");
  for (const json& s : steps) {
    m.steps.push_back(integer(s, "a step", path, 0, kMaxSteps));
    if (m.steps.size() > 1 && m.steps.back() <= m.steps[m.steps.size() - 2]) fail(path, "\"steps\" is not ascending");
  }
  const json& ddp = field(j, "ddp", path);
  if (ddp.contains("bucket_cap_mb")) {
    if (!ddp.at("bucket_cap_mb").is_number()) fail(path, "ddp.bucket_cap_mb is not a number");
    m.ddp.bucket_cap_mb = ddp.at("bucket_cap_mb").get<double>();
    if (!(m.ddp.bucket_cap_mb > 0 && m.ddp.bucket_cap_mb <= 1 << 20)) fail(path, "ddp.bucket_cap_mb is outside (0, 2^20]");
  }
  if (ddp.contains("first_bucket_bytes") && !ddp.at("first_bucket_bytes").is_null())
    m.ddp.first_bucket_bytes = integer(ddp.at("first_bucket_bytes"), "ddp.first_bucket_bytes", path, 1, int64_t{1} << 40);
  m.ddp.broadcast_buffers = boolean(ddp, "broadcast_buffers", path, true);
  m.ddp.find_unused_parameters = boolean(ddp, "find_unused_parameters", path, false);
  m.ddp.gradient_as_bucket_view = boolean(ddp, "gradient_as_bucket_view", path, false);
  m.ddp.static_graph = boolean(ddp, "static_graph", path, false);
  if (ddp.contains("comm_hook") && !ddp.at("comm_hook").is_null()) {
    if (!ddp.at("comm_hook").is_string()) fail(path, "ddp.comm_hook is not a string");
    m.ddp.comm_hook = ddp.at("comm_hook").get<std::string>();
  }
  for (const auto& [key, out] : {std::pair<const char*, std::string*>{"comm_hook_module", &m.ddp.comm_hook_module},
                                  {"comm_hook_inner", &m.ddp.comm_hook_inner}})
    if (ddp.contains(key) && ddp.at(key).is_string()) *out = ddp.at(key).get<std::string>();
  if (ddp.contains("comm_hook_state") && !ddp.at("comm_hook_state").is_null()) m.ddp.comm_hook_state = ddp.at("comm_hook_state");
  check_hook_state(m.ddp.comm_hook_state, path);
  m.params = tensor_infos(field(j, "params", path), "params", path);
  if (j.contains("unchecked_params") && !j.at("unchecked_params").is_null()) {
    const json& u = j.at("unchecked_params");
    if (!u.is_array() || u.size() > kMaxTensors) fail(path, "\"unchecked_params\" is not a list");
    for (const json& t : u)
      m.unchecked_params.push_back({str(t, "name", path), t.value("dtype", std::string("?")), t.value("why", std::string("?"))});
  }
  if (m.params.empty() && m.unchecked_params.empty()) fail(path, "\"params\" is empty");
  if (j.contains("buffers")) m.buffers = tensor_infos(j.at("buffers"), "buffers", path);
  const json& opt = field(j, "optimizer", path);
  m.optimizer_class = str(opt, "class", path);
  m.param_groups = field(opt, "param_groups", path);
  check_param_groups(m.param_groups, m.params.size(), path);
  if (opt.contains("missing_params") && !opt.at("missing_params").is_null())
    m.missing_params = indices(opt.at("missing_params"), "optimizer.missing_params", path, m.params.size());
  if (opt.contains("missing_unchecked") && opt.at("missing_unchecked").is_array())
    for (const json& n : opt.at("missing_unchecked"))
      if (n.is_string()) m.missing_unchecked.push_back(n.get<std::string>());
  if (opt.contains("foreign_params") && !opt.at("foreign_params").is_null())
    m.foreign_params = integer(opt.at("foreign_params"), "optimizer.foreign_params", path, 0, int64_t{1} << 40);
  m.complete = boolean(j, "complete", path, true);
  m.join = boolean(j, "join", path, false);
  if (j.contains("stopped") && j.at("stopped").is_object()) {
    const json& st = j.at("stopped");
    m.stopped_step = st.contains("step") && st.at("step").is_number_integer() ? st.at("step").get<int64_t>() : 0;
    m.stopped_why = st.value("why", std::string("(no reason given)"));
  }
  if (j.contains("lightning") && j.at("lightning").is_object())
    m.lightning_strategy = j.at("lightning").value("strategy", std::string("ddp"));
  if (j.contains("averaging") && !j.at("averaging").is_null()) {
    const json& a = j.at("averaging");
    if (!a.is_array() || a.size() > static_cast<size_t>(kMaxSteps)) fail(path, "\"averaging\" is not a list");
    for (const json& e : a)
      m.averaging.push_back({integer(field(e, "after_step", path), "averaging.after_step", path, 0, kMaxSteps),
                             e.contains("group_size") && !e.at("group_size").is_null()
                                 ? integer(e.at("group_size"), "averaging.group_size", path, 1, kMaxWorldSize)
                                 : int64_t{0}});
  }
  if (j.contains("first_ready_order") && !j.at("first_ready_order").is_null())
    m.first_ready_order = indices(j.at("first_ready_order"), "first_ready_order", path, m.params.size());
  for (const char* when : {"initial", "rebuilt"}) {
    if (!j.contains("buckets") || !j.at("buckets").is_object() || !j.at("buckets").contains(when)) continue;
    const json& b = j.at("buckets").at(when);
    if (!b.is_array()) fail(path, std::string("buckets.") + when + " is not a list");
    auto& layout = std::string(when) == "initial" ? m.torch_buckets_initial : m.torch_buckets;
    for (const json& bucket : b) layout.push_back(indices(bucket, "a bucket's entry", path, m.params.size()));
  }
  m.sqrt_exact = boolean(j, "sqrt_exact", path, true);
  if (j.contains("env") && j.at("env").is_object())
    for (const auto& [k, v] : j.at("env").items())
      if (v.is_string()) m.env[k] = v.get<std::string>();
  return m;
}

std::string describe_shape(const std::vector<int64_t>& s) {
  return "[" + fmt::format("{}", fmt::join(s, ", ")) + "]";
}

}  // namespace

std::string step_path(const std::string& dir, int rank, int64_t step) {
  return fmt::format("{}/rank{}/step{:06d}.safetensors", dir, rank, step);
}

const safetensors::Tensor* StepRecord::find(const std::string& kind, const std::string& name) const {
  auto it = tensors.find(kind + "/" + name);
  if (it == tensors.end() && grad_step_is_grad && kind == "grad_step") return find("grad", name);  // one copy
  return it == tensors.end() ? nullptr : &it->second;
}

bool StepRecord::digest(const std::string& kind, const std::string& name, uint32_t* out) const {
  if (const safetensors::Tensor* t = find(kind, name)) {
    *out = digest_of(t->data);
    return true;
  }
  auto it = crc32.find(kind + "/" + name);
  if (it == crc32.end()) return false;
  *out = it->second;
  return true;
}

uint32_t crc32_of(const float* values, size_t n) {
  static_assert(sizeof(float) == 4, "float32");
  // zlib's crc32 takes a uInt length: feed it in pieces below 4 GiB.
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const auto* bytes = reinterpret_cast<const Bytef*>(values);
  size_t left = n * sizeof(float);
  while (left > 0) {
    const auto piece = static_cast<uInt>(std::min<size_t>(left, size_t{1} << 30));
    crc = ::crc32(crc, bytes, piece);
    bytes += piece;
    left -= piece;
  }
  return static_cast<uint32_t>(crc);
}

uint32_t crc32_of(const std::vector<float>& values) { return crc32_of(values.data(), values.size()); }

uint32_t fold64_of(const float* values, size_t n) {
  constexpr size_t kColumns = 1021;  // a prime: the rows of a weight matrix do not line up with the columns
  std::vector<uint64_t> sums(kColumns, 0);
  const size_t words = n / 2;
  size_t j = 0;
  for (; j + kColumns <= words; j += kColumns) {
    for (size_t c = 0; c < kColumns; ++c) {
      uint64_t w;
      std::memcpy(&w, values + 2 * (j + c), sizeof w);
      sums[c] += w;
    }
  }
  for (size_t c = 0; j + c < words; ++c) {
    uint64_t w;
    std::memcpy(&w, values + 2 * (j + c), sizeof w);
    sums[c] += w;
  }
  if (n % 2) {
    uint32_t last;
    std::memcpy(&last, values + n - 1, sizeof last);
    sums[words % kColumns] += last;
  }
  return static_cast<uint32_t>(::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(sums.data()),
                                       static_cast<uInt>(sums.size() * sizeof(uint64_t))));
}

uint32_t StepRecord::digest_of(const float* values, size_t n) const {
  return fold64 ? fold64_of(values, n) : crc32_of(values, n);
}

int64_t Run::total_steps() const {
  int64_t n = 0;
  for (const Manifest& m : ranks) n += static_cast<int64_t>(m.steps.size());
  return n;
}

Run open_run(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  Run run;
  run.dir = dir;
  if (!is_dir(dir)) fail(dir, "is not a directory (give the RUN_DIR that DDPTrace wrote)");
  if (!is_dir(dir + "/rank0")) fail(dir, "has no rank0/ (empty, or not a directory DDPTrace wrote)");
  Manifest first = parse_manifest(dir + "/rank0/manifest.json");
  run.ranks.reserve(static_cast<size_t>(first.world_size));  // m0 below must not move
  run.ranks.push_back(std::move(first));
  const Manifest& m0 = run.ranks[0];
  if (!m0.not_recorded.empty()) fail(dir, "nothing to check: DDPTrace recorded nothing (" + m0.not_recorded + ")");
  if (m0.rank != 0) fail(m0.path, fmt::format("says rank {}, but lies in rank0/", m0.rank));
  for (int r = 1; r < m0.world_size; ++r) {
    const std::string rd = fmt::format("{}/rank{}", dir, r);
    if (!is_dir(rd)) fail(rd, fmt::format("missing: the run has world_size {} but rank {} left no trace", m0.world_size, r));
    Manifest m = parse_manifest(rd + "/manifest.json");
    const auto differs = [&](const std::string& what) {
      fail(m.path, "its " + what + " differs from rank 0's (" + m0.path + "): a manifest of another run?");
    };
    if (m.run_id != m0.run_id) differs("run_id");
    if (m.rank != r) fail(m.path, fmt::format("says rank {}, but lies in rank{}/", m.rank, r));
    if (m.world_size != m0.world_size) differs("world_size");
    if (m.params.size() != m0.params.size()) differs("number of parameters");
    for (size_t i = 0; i < m.params.size(); ++i)
      if (m.params[i].name != m0.params[i].name || m.params[i].shape != m0.params[i].shape)
        differs("parameter " + std::to_string(i) + " ('" + m.params[i].name + "')");
    if (m.backend != m0.backend) differs("backend");
    if (m.ddp.bucket_cap_mb != m0.ddp.bucket_cap_mb || m.ddp.comm_hook != m0.ddp.comm_hook ||
        m.ddp.find_unused_parameters != m0.ddp.find_unused_parameters ||
        m.ddp.gradient_as_bucket_view != m0.ddp.gradient_as_bucket_view)
      differs("DDP options");
    run.ranks.push_back(std::move(m));
  }
  if (is_dir(fmt::format("{}/rank{}", dir, m0.world_size)))
    fail(fmt::format("{}/rank{}", dir, m0.world_size), fmt::format("exists, but the run's world_size is {}", m0.world_size));
  run.steps = m0.steps;
  if (run.total_steps() == 0)
    fail(m0.path, m0.stopped_step >= 0 ? "records no step: recording stopped at step " + std::to_string(m0.stopped_step) +
                                             " (" + m0.stopped_why + ")"
                                       : "records no step (was optimizer.step() called between DDPTrace() and close()?)");
  return run;
}

StepRecord read_step_fields(const Run& run, int rank, int64_t step);

StepRecord read_step(const Run& run, int rank, int64_t step) {
  try {
    return read_step_fields(run, rank, step);
  } catch (const nlohmann::json::exception& e) {
    throw TraceError(escape_control(step_path(run.dir, rank, step) + ": unexpected metadata (" + e.what() + ")"));
  }
}

StepRecord read_step_fields(const Run& run, int rank, int64_t step) {
  StepRecord rec;
  rec.path = step_path(run.dir, rank, step);
  rec.rank = rank;
  rec.step = step;
  const Manifest& m = run.ranks[static_cast<size_t>(rank)];
  struct stat st {};
  if (::stat(rec.path.c_str(), &st) != 0)
    fail(rec.path, fmt::format("missing: the manifest lists step {} for rank {}", step, rank));
  safetensors::LoadInfo info;
  try {
    rec.tensors = safetensors::load(rec.path, &info);
  } catch (const safetensors::FormatError& e) {
    throw TraceError(e.what());
  }
  auto meta_it = info.metadata.find("ddplab");
  if (meta_it == info.metadata.end()) fail(rec.path, "has no \"ddplab\" entry in __metadata__ (not written by ddplab_trace)");
  json meta;
  try {
    meta = json::parse(meta_it->second);
  } catch (const json::exception& e) {
    fail(rec.path, std::string("__metadata__.ddplab is not valid JSON (") + e.what() + ")");
  }
  if (integer(field(meta, "step", rec.path), "metadata step", rec.path, 0, kMaxSteps) != step)
    fail(rec.path, "its metadata names step " + meta.at("step").dump());
  if (meta.contains("run_id") && meta.at("run_id") != m.run_id)
    fail(rec.path, "belongs to another run (run_id " + meta.at("run_id").dump() + ", the manifest's " + m.run_id + ")");
  const size_t np = m.params.size();
  for (const json& b : field(meta, "backwards", rec.path)) {
    Backward bw;
    bw.sync = boolean(b, "sync", rec.path, true);
    bw.ready = indices(field(b, "ready", rec.path), "a backward's ready order", rec.path, np);
    rec.backwards.push_back(std::move(bw));
  }
  if (meta.contains("inputs") && meta.at("inputs").is_array()) {
    for (const json& fwd : meta.at("inputs")) {
      std::vector<std::string> fps;
      if (fwd.is_array())
        for (const json& f : fwd)
          if (f.is_string()) fps.push_back(f.get<std::string>());
      rec.inputs.push_back(std::move(fps));
    }
  }
  rec.index = step;
  if (meta.contains("segment") && !meta.at("segment").is_null()) {
    const json& seg = meta.at("segment");
    if (!seg.is_array() || seg.size() != 2) fail(rec.path, "\"segment\" is not a pair [segment, index]");
    rec.segment = integer(seg[0], "segment", rec.path, 0, kMaxSteps);
    rec.index = integer(seg[1], "segment index", rec.path, 0, kMaxSteps);
  }
  if (meta.contains("join") && meta.at("join").is_object()) {
    rec.join = true;
    rec.divide_by_initial_world_size = boolean(meta.at("join"), "divide_by_initial_world_size", rec.path, true);
  }
  if (meta.contains("state_steps") && meta.at("state_steps").is_object())
    for (const auto& [k, v] : meta.at("state_steps").items())
      if (v.is_number()) rec.state_steps[k] = static_cast<int64_t>(v.get<double>());
  if (meta.contains("lr") && meta.at("lr").is_array())
    for (const json& v : meta.at("lr"))
      if (v.is_number()) rec.lr.push_back(v.get<double>());
  if (meta.contains("group_changes") && meta.at("group_changes").is_array()) {
    for (const json& g : meta.at("group_changes")) {
      if (!g.is_object()) fail(rec.path, "\"group_changes\" holds something other than objects");
      json kept = json::object();
      for (const auto& [k, v] : g.items())
        if (!v.is_null() && k != "params") kept[k] = v;
      rec.group_changes.push_back(std::move(kept));
    }
  }
  if (meta.contains("zero_grads") && meta.at("zero_grads").is_array()) {
    for (const json& z : meta.at("zero_grads")) {
      if (!z.is_object()) fail(rec.path, "\"zero_grads\" holds something other than objects");
      StepRecord::ZeroGrad e;
      e.before_backward = static_cast<size_t>(integer(field(z, "before_backward", rec.path), "zero_grads.before_backward",
                                                      rec.path, 1, 1 << 20));
      e.set_to_none = boolean(z, "set_to_none", rec.path, false);
      if (z.contains("none")) {
        const json& n = z.at("none");
        if (!n.is_array()) fail(rec.path, "zero_grads.none is not a list");
        for (const json& i : n) e.none.insert(static_cast<size_t>(integer(i, "zero_grads.none", rec.path, 0, 1 << 30)));
      }
      rec.zero_grads.push_back(std::move(e));
    }
  }
  if (meta.contains("num_groups")) rec.num_groups = integer(meta.at("num_groups"), "num_groups", rec.path, 0, 1 << 20);
  if (meta.contains("int_buffers") && meta.at("int_buffers").is_object())
    for (const auto& [k, v] : meta.at("int_buffers").items())
      if (v.is_number_integer()) rec.int_buffers[k] = v.get<int64_t>();

  // Tensors the recorder left out because they are implied (docs/trace_format.md, "elided").
  std::set<std::string> zero_priors;
  bool grad_step_is_grad = false;
  if (meta.contains("elided") && meta.at("elided").is_object()) {
    const json& e = meta.at("elided");
    if (e.contains("prior_zero") && e.at("prior_zero").is_array())
      for (const json& n : e.at("prior_zero"))
        if (n.is_string()) zero_priors.insert(n.get<std::string>());
    grad_step_is_grad = e.value("grad_step", std::string()) == "grad";
    rec.param_before_is_previous = e.value("param_before", std::string()) == "previous";
  }
  rec.grad_step_is_grad = grad_step_is_grad;
  if (meta.contains("digest")) {
    const json& d = meta.at("digest");
    if (!d.is_string() || (d != "fold64" && d != "crc32"))
      fail(rec.path, "\"digest\" is " + d.dump() + ", not \"fold64\" or \"crc32\" (the digests ddp_check knows)");
    rec.fold64 = d == "fold64";
  }
  if (meta.contains("crc32")) {
    const json& c = meta.at("crc32");
    if (!c.is_object()) fail(rec.path, "\"crc32\" is not an object of digests");
    for (const auto& [key, v] : c.items()) {
      const size_t slash = key.find('/');
      const std::string kind = key.substr(0, slash == std::string::npos ? 0 : slash);
      std::string name = slash == std::string::npos ? "" : key.substr(slash + 1);
      if (kind == "state" && name.rfind('/') != std::string::npos) name = name.substr(0, name.rfind('/'));
      if (kind != "grad" && kind != "param_after" && kind != "state")
        fail(rec.path, "digest '" + key + "' is not of grad/, param_after/ or state/ (the kinds ddp_check predicts)");
      if (!std::any_of(m.params.begin(), m.params.end(), [&](const TensorInfo& t) { return t.name == name; }))
        fail(rec.path, "digest '" + key + "' names no parameter of the manifest");
      if (rec.tensors.count(key)) fail(rec.path, "'" + key + "' is both a tensor and a digest");
      rec.crc32[key] = static_cast<uint32_t>(integer(v, "digest '" + key + "'", rec.path, 0, 0xffffffffLL));
    }
  }
  // Every tensor must name a known parameter or buffer and have its shape.
  std::map<std::string, const TensorInfo*> params, buffers;
  for (const TensorInfo& t : m.params) params[t.name] = &t;
  for (const TensorInfo& t : m.buffers) buffers[t.name] = &t;
  for (const auto& [key, t] : rec.tensors) {
    const size_t slash = key.find('/');
    if (slash == std::string::npos) fail(rec.path, "tensor '" + key + "' has no kind (expected <kind>/<name>)");
    std::string kind = key.substr(0, slash), name = key.substr(slash + 1);
    const TensorInfo* info = nullptr;
    if (kind == "buffer") {
      auto it = buffers.find(name);
      if (it == buffers.end()) fail(rec.path, "tensor '" + key + "' names no buffer of the manifest");
      info = it->second;
    } else {
      if (kind == "local") {  // local/<k>/<name>
        const size_t s2 = name.find('/');
        if (s2 == std::string::npos) fail(rec.path, "tensor '" + key + "' should be local/<backward>/<name>");
        const int64_t k = parse_int("backward index of '" + key + "'", name.substr(0, s2));
        if (k < 0 || static_cast<size_t>(k) >= rec.backwards.size())
          fail(rec.path, fmt::format("tensor '{}' names backward {}, but the step has {}", key, k, rec.backwards.size()));
        name = name.substr(s2 + 1);
      } else if (kind == "state") {  // state/<name>/<key>
        const size_t s2 = name.rfind('/');
        if (s2 == std::string::npos) fail(rec.path, "tensor '" + key + "' should be state/<name>/<key>");
        name = name.substr(0, s2);
      } else if (kind != "prior" && kind != "grad" && kind != "grad_step" && kind != "param_before" &&
                 kind != "param_after") {
        fail(rec.path, "tensor '" + key + "' has an unknown kind '" + kind + "'");
      }
      auto it = params.find(name);
      if (it == params.end()) fail(rec.path, "tensor '" + key + "' names no parameter of the manifest");
      info = it->second;
      if (kind == "state") continue;  // an optimizer's state may have any shape (LBFGS keeps flat history)
    }
    if (static_cast<int64_t>(t.data.size()) != info->numel)
      fail(rec.path, "tensor '" + key + "' has shape " + describe_shape(t.shape) + " but the manifest says " +
                         describe_shape(info->shape));
  }
  for (const TensorInfo& p : m.params) {
    if (zero_priors.count(p.name) && !rec.find("prior", p.name))
      rec.tensors["prior/" + p.name] = {p.shape, std::vector<float>(static_cast<size_t>(p.numel), 0.0f)};
    if (grad_step_is_grad && !rec.find("grad_step", p.name) && rec.crc32.count("grad/" + p.name))
      rec.crc32["grad_step/" + p.name] = rec.crc32.at("grad/" + p.name);
    if (!rec.find("param_after", p.name) && !rec.crc32.count("param_after/" + p.name))
      fail(rec.path, "has no param_after/" + p.name);
    if (!rec.find("param_before", p.name) && !rec.param_before_is_previous)
      fail(rec.path, "has no param_before/" + p.name);
  }
  return rec;
}

}  // namespace ddplab::check
