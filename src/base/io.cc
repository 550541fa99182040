#include "src/base/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
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

constexpr const char* kTmpSuffix = ".tmp.XXXXXX";
constexpr size_t kNameMax = 255;  // NAME_MAX of Linux file systems

// The descriptor a path names, or -1: /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N,
// /proc/<this pid>/fd/N. Their targets ("pipe:[123]", or the file stdout was redirected to) are not paths
// to resolve by hand: whatever is open there is written through the descriptor itself.
int descriptor_of(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  std::string n;
  for (const std::string& dir :
       {std::string("/dev/fd/"), std::string("/proc/self/fd/"), "/proc/" + std::to_string(getpid()) + "/fd/"}) {
    if (path.rfind(dir, 0) == 0) n = path.substr(dir.size());
  }
  if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(n);
}

// Where a write to `path` really lands: a symbolic link is followed (the link stays a link and its target
// gets the new content), up to 40 links like the kernel. "" when the chain loops. A link to a descriptor's
// name (above) stops there.
std::string resolve_links(std::string path) {
  for (int hops = 0; hops < 40; ++hops) {
    if (descriptor_of(path) >= 0) return path;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return path;
    std::string target(PATH_MAX, '\0');
    const ssize_t n = readlink(path.c_str(), target.data(), target.size());
    if (n < 0) return path;
    target.resize(static_cast<size_t>(n));
    path = target[0] == '/' ? target : dir_of(path) + "/" + target;
  }
  return "";
}

// A character device or FIFO (/dev/null, /dev/stdout, a pipe): written in place, never replaced.
bool is_stream(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode));
}

// The umask, read without changing it (umask(2) can only set it, and other threads may be creating files):
// /proc/self/status has it since Linux 4.7; otherwise the usual 022.
mode_t current_umask() {
  FILE* f = std::fopen("/proc/self/status", "re");
  if (!f) return 022;
  char line[256];
  unsigned mask = 022;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "Umask: %o", &mask) == 1) break;
  }
  std::fclose(f);
  return static_cast<mode_t>(mask & 0777);
}

// A file replaced keeps its permissions; a new one gets 0666 less the umask, as open(2) would give it.
mode_t mode_for(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return st.st_mode & 07777;
  return 0666 & ~current_umask();
}

std::string write_all(int fd, const std::string& content, const std::string& name) {
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t w = write(fd, content.data() + done, content.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return fmt::format("cannot write '{}': {}", name, std::strerror(errno));
    }
    done += static_cast<size_t>(w);
  }
  return "";
}

}  // namespace

std::string check_writable(const std::string& given) {
  if (given.empty()) return "empty path";
  if (given.size() >= PATH_MAX)
    return fmt::format("the path is {} bytes long; the limit is {}", given.size(), PATH_MAX - 1);
  if (given.back() == '/') return fmt::format("'{}' is a directory, not a file", given);
  const std::string path = resolve_links(given);
  if (path.empty()) return fmt::format("'{}' is a loop of symbolic links", given);
  if (const int fd = descriptor_of(path); fd >= 0) {
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return fmt::format("'{}' names descriptor {}, which is not open", given, fd);
    if ((fl & O_ACCMODE) == O_RDONLY) return fmt::format("'{}' names descriptor {}, open only for reading", given, fd);
    return "";
  }
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return fmt::format("'{}' is a directory, not a file", given);
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
      return access(path.c_str(), W_OK) == 0 ? "" : fmt::format("cannot write '{}': {}", given, std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
      return fmt::format("'{}' is neither a regular file, a character device nor a pipe", given);
  }
  const size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t limit = kNameMax - std::strlen(kTmpSuffix);
  if (name.size() > limit) {
    return fmt::format("the file name '{}...' is {} bytes long; the limit is {} (255 less the temporary file's suffix)",
                       name.substr(0, 16), name.size(), limit);
  }
  const std::string dir = dir_of(path);
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return fmt::format("directory '{}' does not exist", dir);
  if (access(dir.c_str(), W_OK) != 0) {
    return fmt::format("cannot write in directory '{}': {}", dir, std::strerror(errno));
  }
  return "";
}

std::string write_file_atomic(const std::string& given, const std::string& content) {
  if (std::string why = check_writable(given); !why.empty()) return why;
  const std::string path = resolve_links(given);
  if (const int fd = descriptor_of(path); fd >= 0) {  // what is open there gets it, at its offset, never renamed
    std::fflush(nullptr);                             // what the program printed before comes first
    return write_all(fd, content, given);
  }
  if (is_stream(path)) {  // no rename onto a device or pipe: write through it
    const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return fmt::format("cannot open '{}': {}", given, std::strerror(errno));
    const std::string why = write_all(fd, content, given);
    close(fd);
    return why;
  }
  std::string tmp = path + kTmpSuffix;
  const int fd = mkstemp(tmp.data());
  if (fd < 0) return fmt::format("cannot create a temporary file beside '{}': {}", given, std::strerror(errno));
  if (std::string why = write_all(fd, content, tmp); !why.empty()) {
    close(fd);
    unlink(tmp.c_str());
    return why;
  }
  // mkstemp creates 0600: give the file the mode open(2) would have (0666 less the umask), or the mode of
  // the file it replaces.
  const bool flushed = fchmod(fd, mode_for(path)) == 0 && fsync(fd) == 0;
  if (close(fd) != 0 || !flushed) {
    unlink(tmp.c_str());
    return fmt::format("cannot flush '{}': {}", tmp, std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    unlink(tmp.c_str());
    return fmt::format("cannot rename '{}' to '{}': {}", tmp, path, why);
  }
  return "";
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(ch)));
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string json_float(float v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "Infinity" : "-Infinity");
  return fmt::format("{:.9g}", v);
}

namespace {

// Lists nested as the shape's dimensions from `dim` on: [[a, b], [c, d]] for [2, 2].
void nest(std::string& out, const float*& d, const std::vector<int64_t>& shape, size_t dim) {
  out += "[";
  for (int64_t i = 0; i < shape[dim]; ++i) {
    if (i) out += ", ";
    if (dim + 1 < shape.size()) {
      nest(out, d, shape, dim + 1);
    } else {
      out += json_float(*d++);
    }
  }
  out += "]";
}

}  // namespace

std::string json_tensor(const Parameter& p) {
  std::string out;
  const float* d = p.data();
  const std::vector<int64_t> flat = {p.numel()};
  nest(out, d, p.shape.empty() ? flat : p.shape, 0);
  return out;
}

std::string json_buffers(const std::vector<const Buffer*>& buffers) {
  std::string out = "{";
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = *buffers[i];
    std::string v;
    if (b.is_int64) {
      v = std::to_string(b.count);
    } else {
      const float* d = b.value.data();
      nest(v, d, b.shape, 0);
    }
    out += fmt::format("{}\"{}\": {}", i ? ", " : "", b.name, v);
  }
  return out + "}";
}

std::string json_params(const std::vector<const Parameter*>& params, const std::vector<std::string>& names) {
  std::string out = "{";
  for (size_t i = 0; i < params.size(); ++i) {
    out +=
        fmt::format("{}\"{}\": {}", i ? ", " : "", names.empty() ? params[i]->name : names[i], json_tensor(*params[i]));
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
