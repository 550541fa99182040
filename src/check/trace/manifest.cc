// Reading a run's manifests (rank*/manifest.json) into Manifests, and open_run: the ranks agree on one run.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "src/check/trace/trace.h"
#include "src/check/trace/trace_json.h"
#include "src/collective/fsdp.h"

namespace ddplab::check {

using namespace trace_json;

namespace {

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

// "allreduce_order", every field checked: a malformed order is bad input, as any other field.
// n at most `max_n`: the parameters' element count (no bucket is larger), so a trace cannot make the
// replay's seeded check allocate what it likes.
AllreduceOrder parse_allreduce_order(const json& o, const std::string& path, int world_size, int64_t max_n) {
  AllreduceOrder a;
  a.present = true;
  if (!o.is_object()) fail(path, "allreduce_order is not an object");
  a.measured = boolean(o, "measured", path, false);
  if (!a.measured) {
    a.why = o.contains("why") && o.at("why").is_string() ? o.at("why").get<std::string>() : "not measured";
    return a;
  }
  a.seed = integer(field(o, "seed", path), "allreduce_order.seed", path, 0, int64_t{1} << 62);
  if (o.contains("all_reduces")) a.all_reduces = integer(o.at("all_reduces"), "allreduce_order.all_reduces", path, 0, int64_t{1} << 40);
  if (o.contains("seconds") && o.at("seconds").is_number()) a.seconds = o.at("seconds").get<double>();
  const json& sizes = field(o, "sizes", path);
  if (!sizes.is_array() || sizes.size() > kMaxTensors) fail(path, "allreduce_order.sizes is not a list of sizes");
  for (const json& e : sizes) {
    MeasuredSize m;
    m.order.n = static_cast<size_t>(integer(field(e, "n", path), "allreduce_order n", path, 1, std::max<int64_t>(1, max_n)));
    m.digest = static_cast<uint32_t>(integer(field(e, "digest", path), "allreduce_order digest", path, 0, 0xffffffffLL));
    const json& runs = field(e, "runs", path);
    if (runs.is_null()) {
      m.why = e.contains("why") && e.at("why").is_string() ? e.at("why").get<std::string>() : "no chain";
    } else {
      if (!runs.is_array() || runs.size() > (size_t{1} << 20)) fail(path, "allreduce_order runs is not a list of runs");
      for (const json& r : runs) {
        if (!r.is_array() || r.size() != 3 || !r[2].is_array()) fail(path, "an allreduce_order run is not [begin, end, [ranks]]");
        collective::ChainRun run;
        run.begin = static_cast<size_t>(integer(r[0], "a run's begin", path, 0, int64_t{1} << 40));
        run.end = static_cast<size_t>(integer(r[1], "a run's end", path, 0, int64_t{1} << 40));
        for (const json& p : r[2]) run.order.push_back(static_cast<int>(integer(p, "a run's rank", path, 0, kMaxWorldSize)));
        m.order.runs.push_back(std::move(run));
      }
      if (std::string bad = collective::check_measured(m.order, static_cast<size_t>(world_size)); !bad.empty())
        fail(path, fmt::format("allreduce_order for n = {}: {}", m.order.n, bad));
    }
    a.sizes.push_back(std::move(m));
  }
  return a;
}

// "fsdp", every field checked against the rank's shards: each parameter in one group, its shard the rows
// ceil(rows / world_size) chunking gives this rank.
Fsdp parse_fsdp(const json& f, const Manifest& m, const std::string& path) {
  Fsdp out;
  out.present = true;
  if (!f.is_object()) fail(path, "fsdp is not an object");
  out.full = tensor_infos(field(f, "params", path), "fsdp.params", path);
  out.shard_world_size = f.contains("shard_world_size")
                             ? static_cast<int>(integer(f.at("shard_world_size"), "fsdp.shard_world_size", path, 1, m.world_size))
                             : m.world_size;
  out.shard_rank = f.contains("shard_rank")
                       ? static_cast<int>(integer(f.at("shard_rank"), "fsdp.shard_rank", path, 0, out.shard_world_size - 1))
                       : m.rank;
  if (out.shard_world_size != m.world_size &&
      !(f.contains("not_modelled") && f.at("not_modelled").is_array() && !f.at("not_modelled").empty()))
    fail(path, "fsdp.shard_world_size differs from world_size, but nothing is said not modelled (HSDP)");
  if (out.full.size() != m.params.size()) fail(path, "fsdp.params does not list the same parameters as params");
  for (size_t i = 0; i < out.full.size(); ++i) {
    const json& e = field(f, "params", path)[i];
    out.shard_dim.push_back(e.contains("shard_dim") ? integer(e.at("shard_dim"), "fsdp shard_dim", path, 0, 7) : 0);
    const TensorInfo &full = out.full[i], &shard = m.params[i];
    if (full.name != shard.name) fail(path, fmt::format("fsdp.params[{}] is '{}', params[{}] '{}'", i, full.name, i, shard.name));
    const size_t d = static_cast<size_t>(out.shard_dim[i]);
    if (full.shape.empty() || d >= full.shape.size() || shard.shape.size() != full.shape.size())
      fail(path, fmt::format("'{}': its shard's shape does not fit its full shape", full.name));
    const collective::ShardRows rows = collective::fsdp_shard_rows(full.shape[d], out.shard_world_size, out.shard_rank);
    for (size_t k = 0; k < full.shape.size(); ++k)
      if (shard.shape[k] != (k == d ? rows.end - rows.begin : full.shape[k]))
        fail(path, fmt::format("'{}': rank {}'s shard is not the rows FSDP gives it of a {}-row parameter at world_size {}",
                               full.name, m.rank, full.shape[d], out.shard_world_size));
  }
  std::vector<int> seen(out.full.size(), 0);
  const json& groups = field(f, "groups", path);
  if (!groups.is_array() || groups.size() > kMaxTensors) fail(path, "fsdp.groups is not a list");
  for (const json& g : groups) {
    out.groups.push_back(indices(field(g, "params", path), "an FSDP group's params", path, out.full.size()));
    out.group_modules.push_back(g.contains("module") && g.at("module").is_string() ? g.at("module").get<std::string>() : "");
    const std::string dtype = g.contains("reduce_dtype") ? str(g, "reduce_dtype", path) : "float32";
    if (dtype != "float32" && dtype != "bfloat16" && dtype != "float16")
      fail(path, "an FSDP group's reduce_dtype is \"" + dtype + "\", not float32, bfloat16 or float16");
    out.reduce_dtypes.push_back(dtype == "bfloat16"  ? collective::ReduceDtype::bfloat16
                                : dtype == "float16" ? collective::ReduceDtype::float16
                                                     : collective::ReduceDtype::float32);
    for (size_t i : out.groups.back()) ++seen[i];
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 1) fail(path, fmt::format("'{}' is in {} FSDP groups (one expected)", out.full[i].name, seen[i]));
  if (f.contains("not_modelled") && f.at("not_modelled").is_array())
    for (const json& n : f.at("not_modelled"))
      if (n.is_string()) out.not_modelled.push_back(n.get<std::string>());
  return out;
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
  if (j.contains("sync")) {
    if (j.at("sync") != "hand") fail(path, "\"sync\" is " + j.at("sync").dump() + ", not \"hand\" (the one ddp_check knows)");
    m.hand = true;
  }
  const json& steps = field(j, "steps", path);
  if (!steps.is_array() || steps.size() > static_cast<size_t>(kMaxSteps)) fail(path, "\"steps\" is not a list of step numbers");
  for (const json& s : steps) {
    m.steps.push_back(integer(s, "a step", path, 0, kMaxSteps));
    if (m.steps.size() > 1 && m.steps.back() <= m.steps[m.steps.size() - 2]) fail(path, "\"steps\" is not ascending");
  }
  const bool fsdp = j.contains("fsdp") && !j.at("fsdp").is_null();
  const json& ddp = fsdp && !j.contains("ddp") ? json::object() : field(j, "ddp", path);
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
  if (j.contains("outside_params") && !j.at("outside_params").is_null()) {
    const json& o = j.at("outside_params");
    const std::vector<TensorInfo> infos = tensor_infos(o, "outside_params", path);
    for (size_t i = 0; i < infos.size(); ++i)
      m.outside_params.push_back({infos[i], o[i].value("why", std::string("frozen")), boolean(o[i], "in_optimizer", path, false),
                                  o[i].contains("initial") ? integer(o[i].at("initial"), "outside_params.initial", path, 0,
                                                                     0xffffffffLL)
                                                           : -1});
  }
  if (j.contains("collective_error") && j.at("collective_error").is_object()) {
    const json& e = j.at("collective_error");
    m.collective_error = {integer(field(e, "step", path), "collective_error.step", path, 0, kMaxSteps), str(e, "op", path),
                          e.value("reduce_op", std::string()), e.value("param", std::string()), str(e, "error", path)};
  }
  if (j.contains("nonfinite_first") && j.at("nonfinite_first").is_object()) {
    const json& n = j.at("nonfinite_first");
    m.nonfinite_first = {integer(field(n, "step", path), "nonfinite_first.step", path, 0, kMaxSteps), str(n, "kind", path),
                         str(n, "name", path)};
  }
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
  if (opt.contains("sharded") && !opt.at("sharded").is_null()) {
    const json& sh = opt.at("sharded");
    if (!sh.is_object()) fail(path, "optimizer.sharded is " + sh.dump() + ", not an object");
    m.sharded = true;
    m.sharded_by = str(sh, "by", path);
    m.owned = indices(field(sh, "owned", path), "optimizer.sharded.owned", path, m.params.size());
    std::sort(m.owned.begin(), m.owned.end());
  }
  if (opt.contains("foreign_params") && !opt.at("foreign_params").is_null())
    m.foreign_params = integer(opt.at("foreign_params"), "optimizer.foreign_params", path, 0, int64_t{1} << 40);
  m.complete = boolean(j, "complete", path, true);
  m.closed_at_exit = boolean(j, "closed_at_exit", path, false);
  if (j.contains("exit_error") && j.at("exit_error").is_string()) m.exit_error = j.at("exit_error").get<std::string>();
  m.join = boolean(j, "join", path, false);
  if (j.contains("stopped") && j.at("stopped").is_object()) {
    const json& st = j.at("stopped");
    m.stopped_step = st.contains("step") && st.at("step").is_number_integer() ? st.at("step").get<int64_t>() : 0;
    m.stopped_why = st.value("why", std::string("(no reason given)"));
  }
  if (j.contains("lightning") && j.at("lightning").is_object())
    m.lightning_strategy = j.at("lightning").value("strategy", std::string("ddp"));
  if (j.contains("framework") && j.at("framework").is_string()) m.framework = j.at("framework").get<std::string>();
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
  if (j.contains("allreduce_order") && !j.at("allreduce_order").is_null()) {
    int64_t numel = 0;
    for (const TensorInfo& t : m.params) numel += t.numel;
    m.allreduce_order = parse_allreduce_order(j.at("allreduce_order"), path, m.world_size, numel);
  }
  if (fsdp) m.fsdp = parse_fsdp(j.at("fsdp"), m, path);
  if (j.contains("env") && j.at("env").is_object())
    for (const auto& [k, v] : j.at("env").items())
      if (v.is_string()) m.env[k] = v.get<std::string>();
  return m;
}

}  // namespace

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
  read_steps_log(dir + "/rank0", &first);
  run.ranks.reserve(static_cast<size_t>(first.world_size));  // m0 below must not move
  run.ranks.push_back(std::move(first));
  const Manifest& m0 = run.ranks[0];
  if (!m0.not_recorded.empty()) fail(dir, "nothing to check: DDPTrace recorded nothing (" + m0.not_recorded + ")");
  if (m0.rank != 0) fail(m0.path, fmt::format("says rank {}, but lies in rank0/", m0.rank));
  for (int r = 1; r < m0.world_size; ++r) {
    const std::string rd = fmt::format("{}/rank{}", dir, r);
    if (!is_dir(rd)) fail(rd, fmt::format("missing: the run has world_size {} but rank {} left no trace", m0.world_size, r));
    Manifest m = parse_manifest(rd + "/manifest.json");
    read_steps_log(rd, &m);
    const auto differs = [&](const std::string& what) {
      fail(m.path, "its " + what + " differs from rank 0's (" + m0.path + "): a manifest of another run?");
    };
    if (m.run_id != m0.run_id) differs("run_id");
    if (m.rank != r) fail(m.path, fmt::format("says rank {}, but lies in rank{}/", m.rank, r));
    if (m.world_size != m0.world_size) differs("world_size");
    if (m.params.size() != m0.params.size()) differs("number of parameters");
    if (m.fsdp.present != m0.fsdp.present) differs("fsdp");
    if (m.hand != m0.hand) differs("sync");
    if (m.sharded != m0.sharded) differs("optimizer (sharded on some ranks only)");
    // Under FSDP each rank holds its own shard: the ranks agree on the full shapes.
    const auto& shapes = m.fsdp.present ? m.fsdp.full : m.params;
    const auto& shapes0 = m0.fsdp.present ? m0.fsdp.full : m0.params;
    for (size_t i = 0; i < m.params.size(); ++i)
      if (m.params[i].name != m0.params[i].name || shapes[i].shape != shapes0[i].shape)
        differs("parameter " + std::to_string(i) + " ('" + m.params[i].name + "')");
    if (m.fsdp.groups != m0.fsdp.groups || m.fsdp.shard_dim != m0.fsdp.shard_dim ||
        m.fsdp.reduce_dtypes != m0.fsdp.reduce_dtypes || m.fsdp.not_modelled != m0.fsdp.not_modelled ||
        m.fsdp.shard_world_size != m0.fsdp.shard_world_size)
      differs("FSDP layout");
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
  // A script whose own collective raised at its first step recorded none, and the error is what ddp_check says.
  const bool raised = std::any_of(run.ranks.begin(), run.ranks.end(), [](const Manifest& m) { return m.collective_error.step >= 0; });
  if (run.total_steps() == 0 && !raised)
    fail(m0.path, m0.stopped_step >= 0 ? "records no step: recording stopped at step " + std::to_string(m0.stopped_step) +
                                             " (" + m0.stopped_why + ")"
                                       : "records no step (was optimizer.step() called between DDPTrace() and close()?)");
  return run;
}

}  // namespace ddplab::check
