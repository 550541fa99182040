// Reading a sync written by hand's collectives from a step file (docs/trace_format.md, "A sync written by hand"):
// the metadata's "collectives" list and the coll/<index>/in and /out tensors, each checked before use.
#include <fmt/format.h>

#include "src/base/flags.h"

#include "src/check/trace/trace_json.h"

namespace ddplab::check {

using namespace trace_json;

namespace {

std::string text(const json& c, const char* key, const std::string& path, const std::string& what) {
  if (!c.contains(key) || c.at(key).is_null()) return "";
  if (!c.at(key).is_string()) fail(path, what + "." + key + " is not a string");
  return c.at(key).get<std::string>();
}

}  // namespace

void read_collectives(const json& meta, const Manifest& m, StepRecord* rec) {
  const std::string& path = rec->path;
  if (meta.contains("collectives")) {
    const json& list = meta.at("collectives");
    if (!list.is_array()) fail(path, "\"collectives\" is not a list");
    if (list.size() > kMaxTensors) fail(path, fmt::format("\"collectives\" lists {} calls, more than {}", list.size(), kMaxTensors));
    for (size_t i = 0; i < list.size(); ++i) {
      const json& c = list[i];
      const std::string what = fmt::format("\"collectives\"[{}]", i);
      if (!c.is_object()) fail(path, what + " is not an object");
      Collective k;
      k.op = str(c, "op", path);
      if (k.op != "all_reduce" && k.op != "broadcast" && k.op != "all_gather" && k.op != "reduce_scatter")
        fail(path, what + ".op is '" + k.op + "', not all_reduce, broadcast, all_gather or reduce_scatter");
      k.reduce_op = text(c, "reduce_op", path, what);
      k.async = boolean(c, "async", path, false);
      k.numel = integer(field(c, "numel", path), what + ".numel", path, 0, int64_t{1} << 40);
      k.target = str(c, "target", path);
      if (k.target != "grad" && k.target != "param" && k.target != "buffer")
        fail(path, what + ".target is '" + k.target + "', not grad, param or buffer");
      k.param = text(c, "param", path, what);
      if (k.target != "buffer") {
        bool known = false;
        for (const TensorInfo& t : m.params) known = known || t.name == k.param;
        if (!known) fail(path, what + " names '" + k.param + "', no parameter of the manifest");
      }
      k.in_backward = boolean(c, "in_backward", path, false);
      k.in_step = boolean(c, "in_step", path, false);
      k.backwards_done = integer(field(c, "backwards_done", path), what + ".backwards_done", path, 0, kMaxSteps);
      if (c.contains("src")) k.src = integer(c.at("src"), what + ".src", path, 0, m.world_size - 1);
      k.other_group = c.contains("group");
      k.dtype = text(c, "dtype", path, what);
      k.waited = text(c, "waited", path, what);
      k.done_before_step = boolean(c, "done_before_step", path, true);
      k.kept = boolean(c, "kept", path, false);
      rec->collectives.push_back(std::move(k));
    }
  }
  // coll/<index>/in and /out leave the map of the parameters' tensors.
  for (auto it = rec->tensors.lower_bound("coll/"); it != rec->tensors.end() && it->first.rfind("coll/", 0) == 0;) {
    const std::string rest = it->first.substr(5);
    const size_t slash = rest.find('/');
    const std::string end = slash == std::string::npos ? "" : rest.substr(slash + 1);
    const int64_t idx = slash == std::string::npos ? -1 : parse_int("collective index of '" + it->first + "'", rest.substr(0, slash));
    if (idx < 0 || static_cast<size_t>(idx) >= rec->collectives.size() || (end != "in" && end != "out"))
      fail(path, fmt::format("tensor '{}' is not coll/<index>/in or /out of one of the step's {} collectives", it->first,
                             rec->collectives.size()));
    Collective& k = rec->collectives[static_cast<size_t>(idx)];
    if (!k.kept) fail(path, fmt::format("tensor '{}' of a collective whose \"kept\" is false", it->first));
    if (end == "in" && static_cast<int64_t>(it->second.data.size()) != k.numel)
      fail(path, fmt::format("tensor '{}' holds {} values, its collective's numel is {}", it->first,
                             it->second.data.size(), k.numel));
    (end == "in" ? k.in : k.out) = std::move(it->second.data);
    it = rec->tensors.erase(it);
  }
  for (size_t i = 0; i < rec->collectives.size(); ++i) {
    const Collective& k = rec->collectives[i];
    if (k.kept && (k.in.empty() != (k.numel == 0) || (k.out.empty() && k.numel > 0)))
      fail(path, fmt::format("collective {} is \"kept\" but coll/{}/in or /out is missing", i, i));
  }
}

}  // namespace ddplab::check
