// Typed access to the trace's JSON (manifests, step metadata): a missing, mistyped or out-of-range field is
// one TraceError naming the file and the field. Shared by manifest.cc and trace.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/check/trace/trace.h"

namespace ddplab::check::trace_json {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& what);
bool is_dir(const std::string& p);
json read_json_file(const std::string& path);  // at most 64 MiB
const json& field(const json& j, const std::string& key, const std::string& path);
std::string str(const json& j, const std::string& key, const std::string& path);
int64_t integer(const json& v, const std::string& what, const std::string& path, int64_t lo, int64_t hi);
bool boolean(const json& j, const std::string& key, const std::string& path, bool def);  // absent or null: def
std::vector<size_t> indices(const json& v, const std::string& what, const std::string& path, size_t n);
std::vector<TensorInfo> tensor_infos(const json& v, const std::string& what, const std::string& path);
std::string describe_shape(const std::vector<int64_t>& s);

}  // namespace ddplab::check::trace_json

namespace ddplab::check {
// A sync written by hand: the step's "collectives" and their coll/ tensors into rec (collectives_trace.cc).
void read_collectives(const nlohmann::json& meta, const Manifest& m, StepRecord* rec);
}  // namespace ddplab::check
