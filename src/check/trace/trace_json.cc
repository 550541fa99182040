#include "src/check/trace/trace_json.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "src/base/flags.h"

namespace ddplab::check::trace_json {

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
    if (t.contains("strides") && !t.at("strides").is_null()) {
      const json& st = t.at("strides");
      if (!st.is_array() || st.size() != info.shape.size())
        fail(path, "strides of '" + info.name + "' are not one per dimension of its shape");
      for (const json& d : st) info.strides.push_back(integer(d, "a stride of '" + info.name + "'", path, 0, int64_t{1} << 40));
      // Dense and without overlap: sorted by stride, each dimension's stride is the product of the sizes inside it.
      std::vector<size_t> dims(info.shape.size());
      for (size_t d = 0; d < dims.size(); ++d) dims[d] = d;
      std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) {
        return std::make_pair(info.strides[a], info.shape[a]) < std::make_pair(info.strides[b], info.shape[b]);
      });
      int64_t inner = 1;
      bool dense = true;
      for (size_t d : dims) {
        if (info.shape[d] == 1) continue;  // a dimension of one element: any stride
        dense = dense && info.strides[d] == inner;
        inner *= info.shape[d];
      }
      if (!dense || info.numel == 0)
        fail(path, "strides of '" + info.name + "' " + describe_shape(info.strides) + " do not lay out its " +
                       std::to_string(info.numel) + " elements densely, each once");
    }
    if (t.contains("dtype") && t.at("dtype") != "float32")
      fail(path, "'" + info.name + "' is " + t.at("dtype").dump() + "; ddp_check reads float32 parameters only");
    out.push_back(std::move(info));
  }
  return out;
}

std::string describe_shape(const std::vector<int64_t>& s) {
  return "[" + fmt::format("{}", fmt::join(s, ", ")) + "]";
}

}  // namespace ddplab::check::trace_json
