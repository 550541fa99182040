// Reading one rank's recorded step (rank*/step*.safetensors): tensors, digests and the step's metadata.
#include "src/check/trace/trace.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "src/base/flags.h"
#include "src/check/trace/trace_json.h"

namespace ddplab::check {

using namespace trace_json;

std::vector<int64_t> TensorInfo::memory_order() const {
  // Every row-major index at its offset in memory; offsets must cover [0, numel) once each (dense, no overlap).
  std::vector<int64_t> order(static_cast<size_t>(numel), -1);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t flat = 0; flat < numel; ++flat) {
    int64_t off = 0;
    for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * strides[d];
    if (off < 0 || off >= numel || order[static_cast<size_t>(off)] >= 0) return {};
    order[static_cast<size_t>(off)] = flat;
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return order;
}

std::string step_path(const std::string& dir, int rank, int64_t step) {
  return fmt::format("{}/rank{}/step{:06d}.safetensors", dir, rank, step);
}

const safetensors::Tensor* StepRecord::find(const std::string& kind, const std::string& name) const {
  auto it = tensors.find(kind + "/" + name);
  if (it == tensors.end() && grad_step_is_grad && kind == "grad_step") return find("grad", name);  // one copy
  return it == tensors.end() ? nullptr : &it->second;
}

StepRecord read_step_fields(const Run& run, int rank, int64_t step);

namespace {

// "wsum": {"columns": 1021} and the float64 tensors "wsum/<kind>" [parameters, 3] (load()'s f64).
void read_wsum(const json& meta, const Manifest& m, const std::map<std::string, safetensors::Tensor64>& f64,
               StepRecord* rec) {
  auto f32 = rec->tensors.lower_bound("wsum/");
  if (f32 != rec->tensors.end() && f32->first.rfind("wsum/", 0) == 0)
    fail(rec->path, "tensor '" + f32->first + "' is F32; the weighted sums are F64");
  if (!meta.contains("wsum")) {
    if (!f64.empty()) fail(rec->path, "tensor '" + f64.begin()->first + "' but no \"wsum\" in the metadata");
    return;
  }
  if (!rec->digests_only) fail(rec->path, "\"wsum\" in a step that is not in \"mode\": \"digests\"");
  const json& w = meta.at("wsum");
  if (!w.is_object()) fail(rec->path, "\"wsum\" is not an object");
  rec->wsum_columns = static_cast<size_t>(integer(field(w, "columns", rec->path), "wsum.columns", rec->path, 1021, 1021));
  for (auto it = f64.begin(); it != f64.end(); ++it) {
    const std::string kind = it->first.substr(5);
    const safetensors::Tensor64& t = it->second;
    if (t.shape != std::vector<int64_t>{static_cast<int64_t>(m.params.size()), 3})
      fail(rec->path, fmt::format("tensor '{}' should be F64 of shape [{}, 3] (S, A and Q per parameter), not {}",
                                  it->first, m.params.size(), describe_shape(t.shape)));
    if (kind.rfind("local/", 0) == 0) {
      const int64_t k = parse_int("backward index of '" + it->first + "'", kind.substr(6));
      if (k < 0 || static_cast<size_t>(k) >= rec->backwards.size())
        fail(rec->path, fmt::format("tensor '{}' names backward {}, but the step has {}", it->first, k, rec->backwards.size()));
    } else if (kind != "prior" && kind != "grad" && kind != "grad_step") {
      fail(rec->path, "tensor '" + it->first + "' is of no weighted-sum kind ddp_check knows (prior, local/<k>, grad, "
                      "grad_step)");
    }
    std::vector<std::array<double, 3>>& out = rec->wsum[kind];
    for (size_t i = 0; i < m.params.size(); ++i) out.push_back({t.data[3 * i], t.data[3 * i + 1], t.data[3 * i + 2]});
  }
}

// "sample": {"slots": K, "absent": {kind: [slot, ...]}}; its tensors are read with the others.
constexpr int64_t kMaxSampleSlots = 1 << 16;

void read_sample(const json& s, StepRecord* rec) {
  if (!rec->digests_only) fail(rec->path, "\"sample\" in a step that is not in \"mode\": \"digests\"");
  if (!s.is_object()) fail(rec->path, "\"sample\" is not an object");
  rec->sample.slots = static_cast<size_t>(integer(field(s, "slots", rec->path), "sample.slots", rec->path, 1, kMaxSampleSlots));
  if (!s.contains("absent")) return;
  if (!s.at("absent").is_object()) fail(rec->path, "\"sample\".absent is not an object");
  for (const auto& [kind, slots] : s.at("absent").items()) {
    if (!slots.is_array()) fail(rec->path, "\"sample\".absent." + kind + " is not a list");
    for (const json& k : slots)
      rec->sample.absent[kind].insert(static_cast<size_t>(
          integer(k, "sample.absent slot", rec->path, 0, static_cast<int64_t>(rec->sample.slots) - 1)));
  }
}

}  // namespace

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
  std::string file = rec.path;  // the step's own file, or steps.log and its record's bytes there
  safetensors::Range range;
  if (::stat(rec.path.c_str(), &st) != 0) {
    auto in_log = m.log.find(step);
    if (in_log == m.log.end())
      fail(rec.path, fmt::format("missing: the manifest lists step {} for rank {}", step, rank));
    file = m.log_path, range = in_log->second;
    rec.path = fmt::format("{} (the record of step {})", m.log_path, step);
  }
  safetensors::LoadInfo info;
  try {
    rec.tensors = safetensors::load(file, &info, "wsum/", range);
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
    if (b.contains("forward")) {
      bw.forward = str(b, "forward", rec.path);
      if (bw.forward != "module" && bw.forward != "none")
        fail(rec.path, "a backward's \"forward\" is '" + bw.forward + "', not \"module\" or \"none\"");
    }
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

  rec.nonfinite_recorded = meta.contains("nonfinite") && meta.at("nonfinite").is_object();
  if (rec.nonfinite_recorded)
    for (const auto& [kind, names] : meta.at("nonfinite").items()) {
      if (!names.is_array()) fail(rec.path, "\"nonfinite\"." + kind + " is not a list");
      auto& out = rec.nonfinite[kind];
      for (const json& n : names) {
        const std::string name = n.is_string() ? n.get<std::string>() : n.dump();
        if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
      }
    }
  if (meta.contains("outside") && meta.at("outside").is_object())
    for (const auto& [name, d] : meta.at("outside").items()) {
      if (!std::any_of(m.outside_params.begin(), m.outside_params.end(), [&](const OutsideParam& o) { return o.info.name == name; }))
        fail(rec.path, "\"outside\" names '" + name + "', which is not among the manifest's outside_params");
      rec.outside[name] = static_cast<uint32_t>(integer(d, "outside digest of '" + name + "'", rec.path, 0, 0xffffffffLL));
    }

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
  // A whole-run step (the recorder's mode after its first steps): no local gradients, every other tensor a digest.
  if (meta.contains("mode")) {
    const json& mode = meta.at("mode");
    if (mode != "digests") fail(rec.path, "\"mode\" is " + mode.dump() + ", not \"digests\" (the mode ddp_check knows)");
    rec.digests_only = true;
  }
  if (meta.contains("sample")) read_sample(meta.at("sample"), &rec);
  if (meta.contains("state_changed") && meta.at("state_changed").is_array())
    for (const json& n : meta.at("state_changed"))
      if (n.is_string()) rec.state_changed.push_back(n.get<std::string>());
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
      const bool whole_run_kind = kind == "grad_step" || kind == "param_before" || kind == "prior";
      if (kind != "grad" && kind != "param_after" && kind != "state" && !(rec.digests_only && whole_run_kind))
        fail(rec.path, "digest '" + key + "' is not of grad/, param_after/ or state/ (the kinds ddp_check predicts)" +
                           (whole_run_kind ? "; a step in \"mode\": \"digests\" may also hold grad_step/, "
                                             "param_before/ and prior/" : ""));
      if (!std::any_of(m.params.begin(), m.params.end(), [&](const TensorInfo& t) { return t.name == name; }))
        fail(rec.path, "digest '" + key + "' names no parameter of the manifest");
      if (rec.tensors.count(key)) fail(rec.path, "'" + key + "' is both a tensor and a digest");
      rec.crc32[key] = static_cast<uint32_t>(integer(v, "digest '" + key + "'", rec.path, 0, 0xffffffffLL));
    }
  }
  // The sample's tensors (read_sample checked its kinds) leave the map of the parameters' tensors.
  for (auto it = rec.tensors.lower_bound("sample/"); it != rec.tensors.end() && it->first.rfind("sample/", 0) == 0;) {
    const std::string kind = it->first.substr(7);
    if (!rec.sample.slots) fail(rec.path, "tensor '" + it->first + "' but no \"sample\" in the metadata");
    if (it->second.data.size() != rec.sample.slots)
      fail(rec.path, fmt::format("tensor '{}' holds {} values, the sample has {} slots", it->first, it->second.data.size(),
                                 rec.sample.slots));
    const size_t s2 = kind.find('/');
    const std::string head = kind.substr(0, s2);
    if (head == "local") {
      const int64_t k = parse_int("backward index of '" + it->first + "'", kind.substr(s2 + 1));
      if (k < 0 || static_cast<size_t>(k) >= rec.backwards.size())
        fail(rec.path, fmt::format("tensor '{}' names backward {}, but the step has {}", it->first, k, rec.backwards.size()));
    } else if (!(s2 == std::string::npos && (head == "prior" || head == "grad" || head == "grad_step" ||
                                             head == "param_before" || head == "param_after")) &&
               !(s2 != std::string::npos && s2 + 1 < kind.size() && (head == "state" || head == "state_after"))) {
      fail(rec.path, "tensor '" + it->first + "' is of no sample kind ddp_check knows");
    }
    rec.sample.values[kind] = std::move(it->second.data);
    it = rec.tensors.erase(it);
  }
  read_wsum(meta, m, info.f64, &rec);
  read_collectives(meta, m, &rec);
  // Every tensor must name a known parameter or buffer and have its shape.
  std::map<std::string, const TensorInfo*> params, buffers, unsharded;  // FSDP: local/ holds unsharded gradients
  for (const TensorInfo& t : m.params) params[t.name] = &t;
  for (const TensorInfo& t : m.fsdp.full) unsharded[t.name] = &t;
  for (const TensorInfo& t : m.buffers) buffers[t.name] = &t;
  for (const auto& [key, t] : rec.tensors) {
    const size_t slash = key.find('/');
    if (slash == std::string::npos) fail(rec.path, "tensor '" + key + "' has no kind (expected <kind>/<name>)");
    std::string kind = key.substr(0, slash), name = key.substr(slash + 1);
    const TensorInfo* info = nullptr;
    if (kind == "outside") {
      auto it = std::find_if(m.outside_params.begin(), m.outside_params.end(),
                             [&](const OutsideParam& o) { return o.info.name == name; });
      if (it == m.outside_params.end()) fail(rec.path, "tensor '" + key + "' names no outside parameter of the manifest");
      info = &it->info;
    } else if (kind == "buffer") {
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
      info = kind == "local" && m.fsdp.present ? unsharded.at(name) : it->second;
      if (kind == "state") continue;  // an optimizer's state may have any shape (LBFGS keeps flat history)
    }
    if (static_cast<int64_t>(t.data.size()) != info->numel)
      fail(rec.path, "tensor '" + key + "' has shape " + describe_shape(t.shape) + " but the manifest says " +
                         describe_shape(info->shape));
  }
  for (const TensorInfo& p : m.params) {
    // A whole-run step replays nothing from them: zeros are not made (a whole model's worth, every step).
    if (zero_priors.count(p.name) && !rec.find("prior", p.name) && !rec.digests_only)
      rec.tensors["prior/" + p.name] = {p.shape, std::vector<float>(static_cast<size_t>(p.numel), 0.0f)};
    if (grad_step_is_grad && !rec.find("grad_step", p.name) && rec.crc32.count("grad/" + p.name))
      rec.crc32["grad_step/" + p.name] = rec.crc32.at("grad/" + p.name);
    if (!rec.find("param_after", p.name) && !rec.crc32.count("param_after/" + p.name))
      fail(rec.path, "has no param_after/" + p.name);
    if (!rec.find("param_before", p.name) && !rec.param_before_is_previous && !rec.crc32.count("param_before/" + p.name))
      fail(rec.path, "has no param_before/" + p.name);
  }
  return rec;
}

}  // namespace ddplab::check
