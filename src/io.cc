#include "src/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

namespace ddplab {
namespace {

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string check_writable(const std::string& path) {
  if (path.empty()) return "empty path";
  if (path.back() == '/') return fmt::format("'{}' is a directory, not a file", path);
  const std::string dir = dir_of(path);
  if (access(dir.c_str(), W_OK) != 0) {
    return fmt::format("cannot write in directory '{}': {}", dir, std::strerror(errno));
  }
  return "";
}

std::string write_file_atomic(const std::string& path, const std::string& content) {
  if (std::string why = check_writable(path); !why.empty()) return why;
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) return fmt::format("cannot create a temporary file beside '{}': {}", path, std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t w = write(fd, content.data() + done, content.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      close(fd);
      unlink(tmp.c_str());
      return fmt::format("cannot write '{}': {}", tmp, why);
    }
    done += static_cast<size_t>(w);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    unlink(tmp.c_str());
    return fmt::format("cannot flush '{}': {}", tmp, std::strerror(errno));
  }
  chmod(tmp.c_str(), 0644);  // mkstemp creates 0600; a dump is an ordinary file
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    unlink(tmp.c_str());
    return fmt::format("cannot rename '{}' to '{}': {}", tmp, path, why);
  }
  return "";
}

std::string json_float(float v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "Infinity" : "-Infinity");
  return fmt::format("{:.9g}", v);
}

std::string json_tensor(const Parameter& p) {
  std::string out;
  const float* d = p.data();
  if (p.shape.size() == 2) {
    const int64_t rows = p.shape[0], cols = p.shape[1];
    out += "[";
    for (int64_t r = 0; r < rows; ++r) {
      out += r ? ", [" : "[";
      for (int64_t c = 0; c < cols; ++c) out += (c ? ", " : "") + json_float(d[r * cols + c]);
      out += "]";
    }
    out += "]";
  } else {
    out += "[";
    for (int64_t i = 0; i < p.numel(); ++i) out += (i ? ", " : "") + json_float(d[i]);
    out += "]";
  }
  return out;
}

std::string json_params(const std::vector<const Parameter*>& params, const std::vector<std::string>& names) {
  std::string out = "{";
  for (size_t i = 0; i < params.size(); ++i) {
    out += fmt::format("{}\"{}\": {}", i ? ", " : "", names.empty() ? params[i]->name : names[i], json_tensor(*params[i]));
  }
  return out + "}";
}

uint64_t fnv1a_bits(const float* v, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], sizeof bits);
    for (int b = 0; b < 4; ++b) h = (h ^ ((bits >> (8 * b)) & 0xffu)) * 1099511628211ull;
  }
  return h;
}

}  // namespace ddplab
